"""A `command` hook for the lifecycle tests: records each event it gets, then answers as told.

    hook_script.py RECORD_FILE [--exit N] [--stderr TEXT] [--answer JSON] [--upper-result]

Each event's JSON (stdin) is appended to RECORD_FILE as one line.
`--upper-result` answers `{"result": <the event's result, upper-cased>}`.
"""

import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("record")
parser.add_argument("--exit", type=int, default=0)
parser.add_argument("--stderr", default="")
parser.add_argument("--answer", default="")
parser.add_argument("--upper-result", action="store_true")
options = parser.parse_args()

event = json.loads(sys.stdin.read())
with open(options.record, "a", encoding="utf-8") as record:
    record.write(json.dumps(event) + "\n")
if options.stderr:
    sys.stderr.write(options.stderr)
if options.upper_result:
    print(json.dumps({"result": str(event.get("result", "")).upper()}))
elif options.answer:
    print(options.answer)
sys.exit(options.exit)
