"""Built-in hook kinds. Importing this package registers them all."""

from hooks.builtin import approval_gate, command  # noqa: F401
