# Counts per API, named launches, kernels and copy directions of a JSONL trace.
import json, collections, sys
c = collections.Counter(); named = collections.Counter(); dirs = collections.Counter(); kern = collections.Counter()
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("type") == "summary": print("summary events", e["events"], "lost", e["lost"]); continue
    c[e["api"]] += 1
    a = e["args"]
    if e["api"].startswith("cuLaunchKernel"):
        named[a.get("kernel") is not None] += 1; kern[a.get("kernel")] += 1
    if "direction" in a: dirs[(e["api"], a["direction"], a["bytes"])] += 1
for k, v in sorted(c.items()): print(k, v)
print("launch named:", dict(named))
for k, v in kern.most_common(15): print("kernel", v, k)
for k, v in sorted(dirs.items(), key=lambda kv: -kv[1])[:20]: print("copy", k, v)
