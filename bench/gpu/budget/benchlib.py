# What report.py and paired.py share: a step file read plain or gzipped,
# and the 95% interval of a mean (Student's t).
import gzip, os, statistics as st

T95 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086}


def step_lines(path):
    """The lines of a step file, `path` or (as results keep it) `path`.gz."""
    return open(path) if os.path.exists(path) else gzip.open(path + ".gz", "rt")


def interval(rs):
    """The 95% interval of the mean of `rs` (at least 2 values)."""
    df = len(rs) - 1
    t = T95.get(df) or T95[max(k for k in T95 if k <= df)]
    half = t * st.stdev(rs) / len(rs) ** 0.5
    return st.mean(rs) - half, st.mean(rs) + half
