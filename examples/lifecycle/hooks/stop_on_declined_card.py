"""tool_error `command` hook: never retry a payment the bank declined — exit 2 aborts the run."""

import json
import sys

event = json.load(sys.stdin)
if "declined" in (event.get("error") or "").lower():
    sys.stderr.write("the card was declined: not retrying a payment")
    sys.exit(2)
