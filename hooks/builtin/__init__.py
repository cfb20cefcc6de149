"""The built-in hook kinds, one module each: its config model and its hook class.

`hooks.registry.HOOK_KINDS` lists them; a new kind is a module here plus one line there.
"""
