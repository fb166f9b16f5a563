#!/usr/bin/env python3
"""Summarise `gpu-gemm-selftest --trace` (a build with -DSMM_RING_TRACE).

Reads the per-block records (SM, block, start, wait, loop, end in ns) on
stdin or from the file named, groups them into launches (the blocks of
one launch return from griddepcontrol.wait together: the records sorted
by that time, blocks-per-launch at a time), and prints, over the launches
after the first five (at least seven launches), the medians of:
  - the period: from one launch's last block end to the next one's;
  - each launch's blocks' start, wait return, last wgmma and end, from
    the previous launch's last block end (median and latest block);
  - each block's phases: start to wait, wait to last wgmma, to its end;
  - on each SM, the gap from one block's end to the next block's start.
"""
import statistics
import sys


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    src = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    launches = None
    rows = []
    for line in src:
        if line.startswith("#"):
            print(line.rstrip())
            words = line.split()
            if len(words) > 2 and words[2] == "launches,":
                launches = int(words[1])
            continue
        f = [int(x) for x in line.split()]
        if len(f) == 6:
            rows.append(f)
    if not rows or not launches:
        sys.exit("no trace records (was the self-test built with -DSMM_RING_TRACE?)")
    if len(rows) % launches != 0:
        sys.exit("%d records for %d launches: not the same number per launch (more "
                 "blocks than the trace holds, SMM_RING_TRACE_MAX? fewer launches, then)" %
                 (len(rows), launches))
    if launches < 7:
        sys.exit("%d launches: at least 7 are needed (the first five are left out)" % launches)
    per = len(rows) // launches
    rows.sort(key=lambda r: r[3])
    groups = [rows[i * per:(i + 1) * per] for i in range(launches)]
    kept = [r for g in groups[5:] for r in g]  # the blocks of launches 6 on
    prev_end = None
    period, cols = [], {k: [] for k in
                        ("start", "wait", "wait_last", "loop", "loop_last", "end", "end_last")}
    for i, g in enumerate(groups):
        end = max(r[5] for r in g)
        if prev_end is not None and i >= 5:
            us = lambda t: (t - prev_end) / 1000.0
            period.append((end - prev_end) / 1000.0)
            cols["start"].append(us(med([r[2] for r in g])))
            cols["wait"].append(us(med([r[3] for r in g])))
            cols["wait_last"].append(us(max(r[3] for r in g)))
            cols["loop"].append(us(med([r[4] for r in g])))
            cols["loop_last"].append(us(max(r[4] for r in g)))
            cols["end"].append(us(med([r[5] for r in g])))
            cols["end_last"].append(us(end))
        prev_end = end
    print("blocks per launch %d; medians over launches 6..%d (us)" % (per, launches))
    print("period (last block end to last block end): %.2f" % med(period))
    print("from the previous launch's last block end: start %.2f, wait returns %.2f "
          "(last %.2f), last wgmma %.2f (last %.2f), end %.2f (last %.2f)" %
          tuple(med(cols[k]) for k in
                ("start", "wait", "wait_last", "loop", "loop_last", "end", "end_last")))
    print("per block: start to wait %.2f, wait to last wgmma %.2f, last wgmma to end %.2f" %
          (med([(r[3] - r[2]) / 1000.0 for r in kept]),
           med([(r[4] - r[3]) / 1000.0 for r in kept]),
           med([(r[5] - r[4]) / 1000.0 for r in kept])))
    by_sm = {}
    for r in kept:
        by_sm.setdefault(r[0], []).append(r)
    gaps = []
    for rs in by_sm.values():
        rs.sort(key=lambda r: r[2])
        gaps += [(b[2] - a[5]) / 1000.0 for a, b in zip(rs, rs[1:])]
    gaps.sort()
    if gaps:
        print("per SM, next block's start minus this block's end: median %.2f, 10%% %.2f, "
              "90%% %.2f" % (med(gaps), gaps[len(gaps) // 10], gaps[9 * len(gaps) // 10]))


if __name__ == "__main__":
    main()
