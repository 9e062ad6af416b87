"""What the links carry: ``explain``'s predicted bytes per iteration against the hosts' link counters.

``actors`` (synchronous) across 3 hosts, every link limited to 100 Mbit/s with ``tbf``. Node 0
records what every host has sent so far (its switch port's counter) after each iteration; the
bytes of the iterations after the first (which also carries the first reset and the set-up) are
compared with what ``explain`` says the crossing edges carry per iteration (the pickled batches
and the weights).

Tolerance: the links carry everything ``explain`` counts plus what it cannot see: Ethernet, IP
and TCP headers, TCP acknowledgements, TensorPipe's framing of each message, and the torchrun
agents' keep-alives. So the carried bytes must be at least the prediction and at most 5% more
(the issue's goal for the benchmark; measured here: 2.1% more; the benchmark's bigger
batches: 1.5% more). A prediction that missed a crossing (e.g. the weights, about a third of the
bytes here) or counted one twice would fall outside.
"""
from __future__ import annotations

import json

from _cluster_job import CFG
from test_cluster import JOB, three_hosts, wait_all  # noqa: F401 (three_hosts is a fixture)

from torchfrag.graph import capture
from torchfrag.policies import PPOFactory, as_policy
from torchfrag.policies.explain import crossings

ITERATIONS = 6
FIRST, LAST = 1, ITERATIONS - 1  # compare the iterations after FIRST up to LAST


def test_explain_predicts_the_bytes_the_links_carry(three_hosts, tmp_path):
    c, out = three_hosts, tmp_path / "out"
    out.mkdir()
    policy = {"name": "actors", "actors": 2, "timeout": 60}
    c.limit(100)
    procs = [c.torchrun(i, [JOB, json.dumps(policy), str(ITERATIONS), str(out)], cwd=str(out),
                        env={"CLUSTER_JOB_COUNT_BYTES": "1"}) for i in range(3)]
    wait_all(procs, 150)
    assert [p.poll() for p in procs] == [0, 0, 0], "\n".join(c.log(i)[-1500:] for i in range(3))
    before = json.loads((out / f"sent{FIRST}.json").read_text())
    after = json.loads((out / f"sent{LAST}.json").read_text())
    carried = sum(after[h] - before[h] for h in after) / (LAST - FIRST)

    loop = PPOFactory("CartPole-v1", CFG, exploration="mode")()
    try:
        cross = crossings(as_policy(policy).place(capture(loop)))
    finally:
        loop.close()
    predicted = sum(x.pickled for x in cross)
    assert {x.kind for x in cross} == {"data", "state"}
    print(f"actors x2, 100 Mbit/s links: {carried:.0f} B/iteration carried, {predicted} predicted "
          f"({100 * (carried / predicted - 1):+.1f}%)")
    assert predicted <= carried <= 1.05 * predicted, (carried, predicted, cross)
