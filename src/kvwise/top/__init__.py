"""`kvwise top`: the live view of a running `kvwise serve` or of vLLM engines directly.

    histograms  Prometheus histogram buckets and quantiles over a window (deltas)
    window      one engine's /metrics over the last minute: the per-replica figures
    plan_check  where the live figures depart from the plan (pool, preemptions)
    host        host memory from /proc/meminfo
    sources     where `top` reads from: a gateway's /kvwise/status, or engines' /metrics
    render      the Rich view of one status
    cli         the command (`--interval`, `--once --json`)

The status shape (a dict, JSON as served by the gateway at /kvwise/status) is shared by the
gateway's page (`kvwise.gateway.status`, `kvwise.gateway.ui`) and by this command.
"""
