"""A running engine's live figures, shared by `kvwise bench`, the gateway's status page and
`kvwise top`: vLLM's Prometheus text read into gauges and histograms, last-minute windows, host
memory, and where the live figures depart from the plan. Depends on nothing else in kvwise."""
