"""Prometheus text metrics for one environment server (``GET /metrics``).

Hand-rolled: five metric families do not justify a client library, and this stays cheap
on the hot path (a dict increment per request).
"""

from __future__ import annotations

import bisect
from collections import Counter

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class ServerMetrics:
    def __init__(self, env_name: str):
        self.env = env_name
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
        return "\n".join(lines) + "\n"
