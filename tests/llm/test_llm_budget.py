"""Budgets and the ledger: caps stop further calls, finished work stays accounted, thread safety."""

from __future__ import annotations

import json
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from coharden.llm import Budget, BudgetExceeded, CallStore, Completion, Ledger, LLMClient, TruncatedReply

from ._helpers import MODEL, Serve, make_config, reply_rule, user

pytestmark = pytest.mark.usefixtures("api_key")

# With the test price (1e-6 in, 2e-6 out): 4000 prompt + 3000 completion tokens = 0.01 USD per call.
TEN_CENTS_RULE = reply_rule("task", "done", prompt_tokens=4000, completion_tokens=3000)


def test_run_cap_stops_further_calls_and_keeps_finished_work(serve: Serve, tmp_path: Path) -> None:
    server = serve([TEN_CENTS_RULE])
    with CallStore(tmp_path / "calls.sqlite") as store:
        client = LLMClient(make_config(server.base_url, max_tokens=4000), store=store, budget=Budget(per_run_usd=0.025))
        done = [client.complete(user(f"task {i}")) for i in range(3)]  # the 3rd starts at 0.02 < 0.025
        with pytest.raises(BudgetExceeded, match="run cost cap reached") as info:
            client.complete(user("task 3"))

        assert [c.content for c in done] == ["done"] * 3
        assert info.value.scope == "run"
        assert info.value.spent_usd == pytest.approx(0.03)
        assert len(server.requests) == 3  # the refused call never reached the provider
        usage = client.ledger.run_usage()
        assert (usage.calls, usage.budget_refusals) == (3, 1)
        assert usage.cost_usd == pytest.approx(0.03)  # the call that crossed the cap is recorded
        assert sorted(store.keys()) == sorted(c.request_hash for c in done)


def test_instance_cap_only_stops_that_instance(serve: Serve) -> None:
    server = serve([TEN_CENTS_RULE])
    client = LLMClient(make_config(server.base_url, max_tokens=4000), budget=Budget(per_instance_usd=0.01))
    client.complete(user("task a1"), instance_id="a")
    with pytest.raises(BudgetExceeded, match="instance 'a' cost cap reached") as info:
        client.complete(user("task a2"), instance_id="a")
    assert info.value.scope == "instance:a"
    assert client.complete(user("task b1"), instance_id="b").content == "done"
    report = client.ledger.to_dict()
    assert report["instances"]["a"]["budget_refusals"] == 1
    assert report["instances"]["b"]["calls"] == 1
    assert report["run"]["calls"] == 2


def test_zero_cap_refuses_the_first_call(serve: Serve) -> None:
    server = serve([TEN_CENTS_RULE])
    with pytest.raises(BudgetExceeded):
        LLMClient(make_config(server.base_url), budget=Budget(per_run_usd=0)).complete(user("task"))
    assert server.requests == []


def test_truncated_replies_count_toward_the_budget(serve: Serve) -> None:
    server = serve([reply_rule("task", "cut", prompt_tokens=4000, completion_tokens=3000, finish_reason="length")])
    client = LLMClient(make_config(server.base_url, max_tokens=4000), budget=Budget(per_run_usd=0.01))
    with pytest.raises(TruncatedReply):
        client.complete(user("task"))
    with pytest.raises(BudgetExceeded):
        client.complete(user("task again"))
    assert len(server.requests) == 1


def test_replay_stops_where_the_recorded_run_stopped(serve: Serve, tmp_path: Path) -> None:
    server = serve([TEN_CENTS_RULE])
    budget = Budget(per_run_usd=0.02)

    def run(client: LLMClient) -> list[str]:
        out = []
        for i in range(5):
            try:
                out.append(client.complete(user(f"task {i}")).content)
            except BudgetExceeded:
                out.append("STOP")
                break
        return out

    config = make_config(server.base_url, max_tokens=4000)
    with CallStore(tmp_path / "calls.sqlite") as store:
        recorded = run(LLMClient(config, store=store, budget=budget))
        server.stop()
        replayed = run(LLMClient(config, store=store, mode="replay", budget=budget))
    assert recorded == replayed == ["done", "done", "STOP"]


def test_concurrent_calls_are_all_accounted(serve: Serve) -> None:
    server = serve([reply_rule("task", "done", prompt_tokens=3, completion_tokens=1)])
    ledger = Ledger()
    client = LLMClient(make_config(server.base_url), ledger=ledger)
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda i: client.complete(user(f"task {i}"), instance_id=f"i{i % 4}"), range(32)))
    assert len(results) == 32
    assert len(server.requests) == 32
    run = ledger.run_usage()
    assert (run.calls, run.prompt_tokens, run.completion_tokens) == (32, 96, 32)
    assert run.cost_usd == pytest.approx(32 * 5e-6)
    assert sum(ledger.instance_usage(f"i{k}").calls for k in range(4)) == 32


def _completion(cost: float) -> Completion:
    return Completion(
        content="x",
        finish_reason="stop",
        model=MODEL,
        prompt_tokens=1,
        completion_tokens=1,
        cost_usd=cost,
        latency_s=0.0,
        request_hash="0" * 64,
    )


def test_ledger_totals_do_not_depend_on_thread_interleaving() -> None:
    costs = [0.1, 1e-17, 0.2, 3e-9, 0.3] * 200
    ledger = Ledger()
    barrier = threading.Barrier(8)

    def work(offset: int) -> None:
        barrier.wait()
        for cost in costs[offset::8]:
            ledger.record_completion(_completion(cost), instance_id=f"i{offset % 2}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sequential = Ledger()
    for cost in reversed(costs):
        sequential.record_completion(_completion(cost))
    assert ledger.run_usage().calls == len(costs)
    assert ledger.run_cost_usd() == sequential.run_cost_usd()  # exactly equal, not approx (math.fsum)


def test_usage_merge_adds_every_total() -> None:
    from coharden.llm import Usage

    a, b = Usage(), Usage()
    for cost in (0.1, 0.2):
        a.add_completion(_completion(cost))
    b.add_completion(_completion(1e-17))
    b.truncations, b.budget_refusals, b.errors = 1, 2, 1
    b.errors_by_kind["unparseable"] += 1
    a.merge(b)
    assert (a.calls, a.prompt_tokens, a.truncations, a.budget_refusals, a.errors) == (3, 3, 1, 2, 1)
    assert a.errors_by_kind == {"unparseable": 1}
    assert a.cost_usd == math.fsum([0.1, 0.2, 1e-17])
    assert b.calls == 1  # the merged-in usage is left as it was


def test_ledger_serializes_to_json() -> None:
    ledger = Ledger()
    ledger.record_completion(_completion(0.5), instance_id="django-1")
    ledger.record_retry(model=MODEL, instance_id="django-1")
    ledger.record_error("auth", model=MODEL)
    data = json.loads(json.dumps(ledger.to_dict()))
    assert set(data) == {"run", "instances", "models"}
    assert data["run"]["calls"] == 1
    assert data["run"]["errors_by_kind"] == {"auth": 1}
    assert data["instances"]["django-1"]["retries"] == 1
    assert data["models"][MODEL]["cost_usd"] == 0.5
