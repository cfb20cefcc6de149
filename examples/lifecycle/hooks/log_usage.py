"""post_turn `command` hook: append one line per turn to var/turns.jsonl."""

import json
import os
import sys

event = json.load(sys.stdin)
os.makedirs("var", exist_ok=True)
with open(os.path.join("var", "turns.jsonl"), "a", encoding="utf-8") as log:
    log.write(json.dumps({k: event.get(k) for k in ("session_id", "turn_id", "user_id", "agent")}) + "\n")
