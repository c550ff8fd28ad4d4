# SPDX-License-Identifier: BSD-3-Clause
"""A Python process the tests drive: each stdin line is a JSON object
{"code": "..."}; the code runs in this process's one namespace and the
value it leaves in ``result`` comes back as one JSON line
{"ok": value} or {"err": "Type: message", "errno": n}.

The tests start several of these (an initiator, one or two targets), so
every engine lives in a process of its own, as in a deployment.
"""
import json
import os
import sys
import traceback

ns = {"__name__": "kvt_test_node"}


def main():
    # Replies go out on a copy of stdout; fd 1 itself goes to stderr, so
    # a library that logs to stdout (NIXL does) cannot garble them.
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    print(json.dumps({"ready": True}), file=replies, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        ns["result"] = None
        try:
            exec(req["code"], ns)
            out = {"ok": ns.get("result")}
        except SystemExit:
            raise   # a forked child of the test's code leaves here
        except BaseException as e:  # the test decides what is fatal
            out = {"err": "%s: %s" % (type(e).__name__, e),
                   "type": type(e).__name__,
                   "errno": getattr(e, "errno", None),
                   "oserror": isinstance(e, OSError),
                   "trace": traceback.format_exc(limit=4)}
        try:
            print(json.dumps(out), file=replies, flush=True)
        except TypeError:
            print(json.dumps({"ok": repr(out.get("ok"))}), file=replies,
                  flush=True)


if __name__ == "__main__":
    main()
