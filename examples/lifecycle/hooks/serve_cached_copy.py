"""tool_error `command` hook: once retries are used up, recover with a placeholder answer.

A real one would read a cache; printing {"result": ...} makes the gateway answer
{"action": "recover", "result": ...}.
"""

import json
import sys

event = json.load(sys.stdin)
print(json.dumps({"result": {"stale": True, "note": f"{event.get('tool_name')} is unavailable"}, "reason": "served a stale copy"}))
