# gputrace's launch names in an attached window vs torch.profiler's kernels.
import json, collections, sys
k = collections.Counter()
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("type") == "summary": continue
    if e["api"].startswith("cuLaunchKernel"): k[e["args"]["kernel"]] += 1
tot = sum(k.values()); print("gputrace launches", tot, "named", tot - k[None])
for n, c in k.most_common(): print("G", c, n)
p = json.load(open(sys.argv[2]))
for n, c in sorted(p["kernels"].items(), key=lambda x: -x[1]): print("P", c, n)
