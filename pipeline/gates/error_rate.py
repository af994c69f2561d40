"""The error-rate gate on an exact binomial bound (Clopper-Pearson).

Pass when the upper bound of the error rate meets the SLO, fail when the lower bound
misses it, inconclusive otherwise. No error in too few requests is inconclusive, not a
pass: with n requests and none failed, the upper bound is about 3 / n at 95%, so an SLO of
0.1% needs some 3,000 requests before it can pass; the message says how many.

An SLO of 0% (the default when `slo.error_rate` is left out) no bound can ever meet: it is
judged on the count, as its author means it. No error passes (the message states the
bound the requests give), one error fails.
"""

from __future__ import annotations

import math

from pipeline.stage_result import Gate
from pipeline.statistics.distributions import clopper_pearson, normal_quantile, trials_to_bound_zero

GATE = "latency.error_rate"


def requests_to_decide(errors: int, requests: int, slo: float, alpha: float) -> int | None:
    """Roughly how many requests in all would decide at the observed rate (None: the
    observed rate is the SLO itself)."""
    if slo <= 0:
        return None                 # judged on the count (error_rate_gate)
    if errors == 0:
        return trials_to_bound_zero(slo, alpha)
    rate = errors / requests
    gap = abs(rate - slo)
    if gap < slo * 1e-3:
        return None
    return math.ceil(1.2 * normal_quantile(1 - alpha) ** 2 * max(rate, slo) / gap**2)


def error_rate_gate(errors: int, requests: int, slo: float, alpha: float,
                    remedy: str = "a longer measurement") -> Gate:
    """`errors / requests <= slo`, each bound one-sided at level alpha."""
    if requests <= 0:
        return Gate(GATE, "not measured", slo * 100, False, "<=", "%",
                    reason="no request was measured")
    low, high = clopper_pearson(errors, requests, alpha)
    observed = errors / requests * 100
    interval = (low * 100, high * 100)
    if slo <= 0:
        outcome = "passed" if errors == 0 else "failed"
        return Gate.decided(GATE, observed, 0.0, outcome, "<=", "%", interval, requests,
                            f"{errors} errors in {requests} requests; an SLO of 0% is "
                            f"judged on the count: any error fails it (the rate is under "
                            f"{high:.4%} at {1 - alpha:.4g})")
    if high <= slo:
        outcome, reason = "passed", f"upper bound {high:.4%} <= {slo:.4%}"
    elif low > slo:
        outcome, reason = "failed", f"lower bound {low:.4%} > {slo:.4%}"
    else:
        needed = requests_to_decide(errors, requests, slo, alpha)
        outcome = "inconclusive"
        reason = (f"{errors} errors in {requests} requests: the exact bound "
                  f"[{low:.4%}, {high:.4%}] straddles {slo:.4%}; ")
        reason += ("the rate is at the SLO, no sample size decides" if needed is None else
                   f"about {max(needed - requests, 1)} more requests would decide ({remedy})")
    return Gate.decided(GATE, observed, slo * 100, outcome, "<=", "%", interval, requests,
                        reason + f" (exact binomial, {1 - alpha:.4g} each side)")
