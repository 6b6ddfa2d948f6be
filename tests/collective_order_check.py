#!/usr/bin/env python3
"""collective_order_check.py TP TRACE...: checks the collective traces of one
job (STRATA_COLLECTIVE_TRACE, one file per rank, named <prefix>.<rank>) for
the order rule of src/parallel/collective_order.h:
  - every group (tp group r // TP, dp group r % TP) has all its members issue
    the same sequence of collectives;
  - the ranks' orders admit one global order (the graph whose nodes are the
    groups' collectives and whose edges are each rank's consecutive issues
    has no cycle): on one queue per process, no two collectives can wait on
    each other;
  - every device collective of the job is on the process's one queue.
A rank may issue collectives of a group only it and its peers are in (the
first dp rank's tp groups gather a checkpoint): that is fine as long as the
above hold."""
import collections
import sys


def main():
    tp = int(sys.argv[1])
    ranks = {}
    for path in sys.argv[2:]:
        with open(path) as f:
            ranks[int(path.rsplit(".", 1)[1])] = [line.split() for line in f if line.strip()]
    group_ops = collections.defaultdict(dict)  # group -> rank -> [op]
    edges = collections.defaultdict(set)
    nodes = set()
    queues = set()
    for r, lines in ranks.items():
        seen = collections.Counter()
        prev = None
        for label, op, queue in lines:
            group = (label, r // tp if label == "tp" else r % tp)
            group_ops[group].setdefault(r, []).append(op)
            node = (group, seen[group])
            seen[group] += 1
            nodes.add(node)
            if prev is not None:
                edges[prev].add(node)
            prev = node
            if queue != "host":
                queues.add(queue)
    bad = []
    for group, by_rank in sorted(group_ops.items()):
        members = [r for r in ranks if (r // tp if group[0] == "tp" else r % tp) == group[1]]
        seqs = {tuple(by_rank.get(r, [])) for r in members}
        if len(seqs) != 1:
            bad.append(f"group {group[0]}{group[1]}: its members issue different sequences")
    indegree = collections.Counter(n for targets in edges.values() for n in targets)
    ready = [n for n in nodes if indegree[n] == 0]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        for m in edges[n]:
            indegree[m] -= 1
            if indegree[m] == 0:
                ready.append(m)
    if done != len(nodes):
        bad.append(f"the ranks' orders form a cycle ({len(nodes) - done} collectives on it)")
    if len(queues) > 1:
        bad.append(f"device collectives on {len(queues)} queues: {sorted(queues)}")
    for b in bad:
        print("collective order:", b)
    total = sum(len(v) for v in ranks.values())
    print(f"collective order: {total} collectives on {len(ranks)} ranks, {len(group_ops)} groups, "
          f"{len(queues)} device queue(s): {'FAIL' if bad else 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
