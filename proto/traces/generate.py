#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""generate.py — regenerate state-machine.json from a real cbd.

    python3 proto/traces/generate.py build/src/cbd proto/traces/state-machine.json

Each case's steps run against a fresh circuit in virtual time; cbd's own
answers become the expectations that every client's local state machine
must reproduce (tests/check_trace.c for C, client/python for Python).
Review the diff by hand: a changed expectation is a changed state machine.
"""
import json, socket, subprocess, tempfile, os, time, sys
cbd = sys.argv[1]
T = 1700000000000
cases = [
 ("consecutive opens at failure_threshold", {"failure_threshold":3,"break_ms":1000},
  [("failure",T),("failure",T+10),("success",T+20),("failure",T+30),("failure",T+40),("failure",T+50),("allow",T+500),("allow",T+1050),("success",T+1060),("allow",T+1070),("success",T+1080)]),
 ("a failure in half_open reopens", {"failure_threshold":1,"break_ms":200,"success_threshold":2},
  [("failure",T),("allow",T+100),("allow",T+200),("failure",T+210),("allow",T+300),("allow",T+410)]),
 ("stragglers never extend the break", {"failure_threshold":1,"break_ms":1000},
  [("failure",T),("failure",T+500),("success",T+600),("allow",T+999),("allow",T+1000)]),
 ("max_gap_ms restarts the chain", {"failure_threshold":3,"max_gap_ms":100},
  [("failure",T),("failure",T+50),("failure",T+200),("failure",T+250),("failure",T+300)]),
 ("forced states", {"failure_threshold":2,"break_ms":1000},
  [("failure",T),("force:open",T+10),("allow",T+20),("force:half_open",T+30),("success",T+40),("force:closed",T+50),("failure",T+60)]),
 ("rate over a count window", {"trip":"rate","window":"count","window_size":4,"minimum_calls":4,"failure_rate":50,"break_ms":1000},
  [("success",T),("failure",T+1),("success",T+2),("success",T+3),("failure",T+4),("failure",T+5),("allow",T+6)]),
 ("rate waits for minimum_calls, then judges (even on a success)", {"trip":"rate","window_size":10,"minimum_calls":5,"failure_rate":50},
  [("failure",T),("failure",T+1),("failure",T+2),("failure",T+3),("success",T+4)]),
 ("rate over a time window forgets old calls", {"trip":"rate","window":"time","window_size":2000,"minimum_calls":3,"failure_rate":60},
  [("failure",T),("failure",T+100),("success",T+2000),("success",T+2100),("failure",T+2500),("failure",T+2600)]),
 ("slow calls open a rate circuit", {"trip":"rate","window_size":4,"minimum_calls":2,"slow_call_ms":100,"slow_call_rate":50},
  [("success:150",T),("success:50",T+1),("success:120",T+2),("success:130",T+3)]),
 ("break_backoff grows the break", {"failure_threshold":1,"success_threshold":1,"break_ms":100,"break_backoff":3,"break_max_ms":500},
  [("failure",T),("allow",T+100),("failure",T+100),("allow",T+399),("allow",T+400),("failure",T+400),("allow",T+900),("success",T+900)]),
 ("preset http-external", {"preset":"http-external"},
  [("failure",T),("success",T+1),("failure",T+2),("success",T+3),("failure",T+4)]),
 ("ignore changes nothing", {"failure_threshold":2},
  [("failure",T),("ignore",T+1),("failure",T+2)]),
]
d = tempfile.mkdtemp(); sock = os.path.join(d, "s")
p = subprocess.Popen([cbd, "-s", sock], stderr=subprocess.DEVNULL)
for _ in range(100):
    if os.path.exists(sock): break
    time.sleep(0.05)
s = socket.socket(socket.AF_UNIX); s.connect(sock); f = s.makefile("rwb")
def call(o):
    f.write((json.dumps(o)+"\n").encode()); f.flush(); return json.loads(f.readline())
KEYS=["state","failure_count","success_count","last_failure_at","opened_at","current_break_ms"]
out=[]
for i,(title,policy,steps) in enumerate(cases):
    name=f"trace-{i}"
    tsteps=[]
    first=True
    for op,now in steps:
        ctx={"now":now}
        if first: ctx.update(policy)
        step={"now":now}
        if op=="allow":
            r=call({"op":"allow","name":name,"ctx":ctx})
            step["op"]="allow"
            step["expect"]={k:r[k] for k in ("allowed","state") }
            if not r["allowed"]: step["expect"]["retry_after_ms"]=r["retry_after_ms"]
            if "permit" in r:
                call({"op":"release_slot","name":name,"token":r["permit"],"ctx":{"now":now}})
        else:
            if op.startswith("force:"):
                st=op.split(":")[1]
                r=call({"op":"set_state","name":name,"state":st,"ctx":ctx})
                step["op"]="force"; step["state"]=st
            else:
                kind=op.split(":")[0]
                req={"op":"record","name":name,"outcome":kind,"ctx":ctx}
                step["op"]=kind
                if ":" in op:
                    step["duration_ms"]=int(op.split(":")[1]); req["duration_ms"]=step["duration_ms"]
                r=call(req)
            assert r.get("ok"), r
            snap=r["snapshot"]
            step["expect"]={k:snap[k] for k in KEYS}
            if "window" in snap:
                step["expect"]["window"]={k:snap["window"][k] for k in ("calls","failures","slow")}
        first=False
        tsteps.append(step)
    out.append({"name":title,"policy":policy,"steps":tsteps})
p.terminate(); p.wait()
doc={"format":"cbd-trace","version":1,
 "about":"Outcome sequences and the circuit after each step, in virtual time (now in ms). The policy is the creating request's ctx; every client's local state machine replays these and must agree with cbd. Steps: success/failure/ignore (optional duration_ms), allow (a permit it grants is handed back at once), force (set_state). Expectations are cbd's own answers.",
 "cases":out}
json.dump(doc, open(sys.argv[2],"w"), indent=1)
print(len(out),"cases")
