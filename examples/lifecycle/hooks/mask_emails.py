"""post_tool_use `command` hook: replace e-mail addresses in a tool's result before the model reads it.

Reads the event on stdin; prints {"result": ...} only when something was masked.
"""

import json
import re
import sys

EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")

event = json.load(sys.stdin)
result = event.get("result")
text = result if isinstance(result, str) else json.dumps(result)
masked = EMAIL.sub("[email]", text)
if masked != text:
    print(json.dumps({"result": masked, "reason": "e-mail addresses masked"}))
