"""Prometheus text metrics for one environment server (``GET /metrics``).

Hand-rolled: five metric families do not justify a client library, and this stays cheap
on the hot path (a dict increment per request).
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Callable

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class ServerMetrics:
    def __init__(self, env_name: str):
        self.env = env_name
        # Prometheus lines of the environment's own dependencies (judge calls...), appended to /metrics.
        self.extra: Callable[[], str] | None = None
        self.requests: Counter[tuple[str, int]] = Counter()
        self.failures: Counter[str] = Counter()
        self.latency_counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0
        self.latency_count = 0
        self.reward_sum = 0.0
        self.reward_count = 0
        self.in_flight = 0
        self.queued = 0
        self.rejected_overload = 0

    def observe_request(self, route: str, status: int) -> None:
        self.requests[(route, status)] += 1

    def observe_verify(self, seconds: float, reward: float, failure_class: str | None) -> None:
        self.latency_counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds
        self.latency_count += 1
        if failure_class:
            self.failures[failure_class] += 1
        else:
            self.reward_sum += reward
            self.reward_count += 1

    def render(self, *, sessions: int = 0) -> str:
        env = f'env="{self.env}"'
        lines = [
            "# HELP verigym_requests_total HTTP requests by route and status.",
            "# TYPE verigym_requests_total counter",
        ]
        for (route, status), n in sorted(self.requests.items()):
            lines.append(f'verigym_requests_total{{{env},route="{route}",status="{status}"}} {n}')
        lines += ["# HELP verigym_verify_seconds Latency of /verify.", "# TYPE verigym_verify_seconds histogram"]
        cumulative = 0
        for bound, n in zip(LATENCY_BUCKETS, self.latency_counts):
            cumulative += n
            lines.append(f'verigym_verify_seconds_bucket{{{env},le="{bound}"}} {cumulative}')
        lines.append(f'verigym_verify_seconds_bucket{{{env},le="+Inf"}} {self.latency_count}')
        lines.append(f"verigym_verify_seconds_sum{{{env}}} {self.latency_sum:.6f}")
        lines.append(f"verigym_verify_seconds_count{{{env}}} {self.latency_count}")
        lines += [
            "# HELP verigym_reward_sum Sum of rewards of scored (non-failed) verifications.",
            "# TYPE verigym_reward_sum counter",
            f"verigym_reward_sum{{{env}}} {self.reward_sum:.6f}",
            "# TYPE verigym_reward_count counter",
            f"verigym_reward_count{{{env}}} {self.reward_count}",
            "# HELP verigym_failures_total Verifications that could not be scored, by failure class.",
            "# TYPE verigym_failures_total counter",
        ]
        for failure_class, n in sorted(self.failures.items()):
            lines.append(f'verigym_failures_total{{{env},class="{failure_class}"}} {n}')
        lines += [
            "# TYPE verigym_in_flight gauge", f"verigym_in_flight{{{env}}} {self.in_flight}",
            "# TYPE verigym_queued gauge", f"verigym_queued{{{env}}} {self.queued}",
            "# TYPE verigym_rejected_overload_total counter",
            f"verigym_rejected_overload_total{{{env}}} {self.rejected_overload}",
            "# TYPE verigym_sessions gauge", f"verigym_sessions{{{env}}} {sessions}",
        ]
        return "\n".join(lines) + "\n" + (self.extra() if self.extra is not None else "")


class JudgeMetrics:
    """Counters of one named judge (servers/judge): asks, HTTP calls, latency, retries, errors
    by kind, cache hits. Rendered per judge with a ``judge`` label."""

    def __init__(self, env_name: str, judge: str):
        self.labels = f'env="{env_name}",judge="{judge}"'
        self.asks: Counter[str] = Counter()  # outcome: ok | error
        self.calls = 0
        self.latency_counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0
        self.retries = 0
        self.errors: Counter[str] = Counter()
        self.cache_hits = 0
        self.cache_misses = 0
        self.circuit_open = 0

    def observe_call(self, seconds: float) -> None:
        self.calls += 1
        self.latency_counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds

    @property
    def cache_hit_rate(self) -> float:
        total = self.cache_hits + self.cache_misses
        return self.cache_hits / total if total else 0.0

    def families(self) -> dict[str, list[str]]:
        """Sample lines of this judge, by metric family (families of all judges are rendered together)."""
        lab = self.labels
        cumulative, buckets = 0, []
        for bound, n in zip(LATENCY_BUCKETS, self.latency_counts):
            cumulative += n
            buckets.append(f'verigym_judge_call_seconds_bucket{{{lab},le="{bound}"}} {cumulative}')
        return {
            "verigym_judge_asks_total": [f'verigym_judge_asks_total{{{lab},outcome="{k}"}} {n}'
                                         for k, n in sorted(self.asks.items())],
            "verigym_judge_calls_total": [f"verigym_judge_calls_total{{{lab}}} {self.calls}"],
            "verigym_judge_call_seconds": buckets + [
                f'verigym_judge_call_seconds_bucket{{{lab},le="+Inf"}} {self.calls}',
                f"verigym_judge_call_seconds_sum{{{lab}}} {self.latency_sum:.6f}",
                f"verigym_judge_call_seconds_count{{{lab}}} {self.calls}"],
            "verigym_judge_retries_total": [f"verigym_judge_retries_total{{{lab}}} {self.retries}"],
            "verigym_judge_errors_total": [f'verigym_judge_errors_total{{{lab},kind="{k}"}} {n}'
                                           for k, n in sorted(self.errors.items())],
            "verigym_judge_cache_hits_total": [f"verigym_judge_cache_hits_total{{{lab}}} {self.cache_hits}"],
            "verigym_judge_cache_misses_total": [f"verigym_judge_cache_misses_total{{{lab}}} {self.cache_misses}"],
            "verigym_judge_cache_hit_ratio": [f"verigym_judge_cache_hit_ratio{{{lab}}} {self.cache_hit_rate:.6f}"],
            "verigym_judge_circuit_open": [f"verigym_judge_circuit_open{{{lab}}} {self.circuit_open}"],
        }


_JUDGE_FAMILIES = {  # family -> (type, help)
    "verigym_judge_asks_total": ("counter", "Judge questions asked by verifiers, by outcome (cache hits included)."),
    "verigym_judge_calls_total": ("counter", "HTTP calls made to the judge endpoint (retries included)."),
    "verigym_judge_call_seconds": ("histogram", "Latency of one HTTP call to the judge."),
    "verigym_judge_retries_total": ("counter", "Judge calls retried (connection error, timeout, 429, 5xx)."),
    "verigym_judge_errors_total": ("counter", "Failed judge calls by kind (connection, timeout, http_5xx, ...)."),
    "verigym_judge_cache_hits_total": ("counter", "Judge questions answered from the cache or a call in flight."),
    "verigym_judge_cache_misses_total": ("counter", "Judge questions that needed a call."),
    "verigym_judge_cache_hit_ratio": ("gauge", "hits / (hits + misses)."),
    "verigym_judge_circuit_open": ("gauge", "1 while the endpoint's circuit breaker fails calls fast."),
}


def render_judge_metrics(judges: list[JudgeMetrics]) -> str:
    """Prometheus text of every judge of a server, grouped by family as the format requires."""
    if not judges:
        return ""
    per_judge = [m.families() for m in judges]
    lines: list[str] = []
    for family, (kind, help_text) in _JUDGE_FAMILIES.items():
        lines += [f"# HELP {family} {help_text}", f"# TYPE {family} {kind}"]
        for families in per_judge:
            lines += families[family]
    return "\n".join(lines) + "\n"
