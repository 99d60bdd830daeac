"""`kvwise deploy`: files for a cluster (Kubernetes manifests, production-stack Helm values, Ray
multi-node launch) that carry exactly the flags `kvwise plan` resolves. Nothing is applied.

    cli.py          the command line; build.py: plan (refuse if vLLM would not start) -> files
    spec.py         DeploySpec: the plan as one deployment description every target renders
    engine_args.py  vLLM's arguments from the plan; what the gateway plans its budget with
    startup.py      the startup probe's budget (weight bytes at a stated rate + an allowance)
    resources.py    CPU, host memory and model-cache size of a replica
    probes.py       /health probes
    k8s_vllm.py, k8s_gateway.py, k8s_redis.py   the Kubernetes objects of each component
    k8s.py, helm.py, ray.py                     the three targets
    gateway_image.py   the gateway's Dockerfile; artefacts.py: files and writing them
    yaml_text.py    YAML text without a YAML library
"""
