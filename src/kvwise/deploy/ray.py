"""`--target ray`: one vLLM instance across nodes on a Ray cluster.

Tensor parallelism inside a node (NVLink/PCIe), pipeline parallelism across nodes (only the
activations of a stage boundary cross the network), as vLLM's distributed serving guide lays out
(docs: serving/parallelism_scaling, "multi-node"). Ray's head listens on 6379, its default GCS
port. `launch.sh` runs on each node; README.md says in which order.
"""

from __future__ import annotations

import shlex

from kvwise.deploy.artefacts import Artefact, Rendered
from kvwise.deploy.k8s_gateway import gateway_args
from kvwise.deploy.spec import VLLM_PORT, DeploySpec

RAY_PORT = 6379  # `ray start --head` default GCS port


def serve_line(spec: DeploySpec) -> str:
    words = ["vllm", "serve", spec.model_id, *spec.engine_args]
    words += [
        "--distributed-executor-backend",
        "ray",
        "--host",
        "0.0.0.0",
        "--port",
        str(VLLM_PORT),
    ]
    return " ".join(shlex.quote(w) for w in words)


def launch_script(spec: DeploySpec, gpus_per_node: int) -> str:
    return f"""#!/usr/bin/env bash
# kvwise deploy --target ray: {spec.model_id} on vLLM {spec.vllm_version},
# TP {spec.tensor_parallel_size} inside each node x PP {spec.pipeline_parallel_size} across nodes.
#   head node:        ./launch.sh head
#   each other node:  ./launch.sh worker HEAD_IP
#   head node, once every node has joined (ray status):  ./launch.sh serve
set -euo pipefail
case "${{1:-}}" in
  head)   ray start --head --port={RAY_PORT} --num-gpus={gpus_per_node} ;;
  worker) ray start --address="${{2:?HEAD_IP}}:{RAY_PORT}" --num-gpus={gpus_per_node} ;;
  serve)  exec {serve_line(spec)} ;;
  *)      echo "usage: $0 head | worker HEAD_IP | serve" >&2; exit 2 ;;
esac
"""


def readme(spec: DeploySpec, gpus_per_node: int, num_nodes: int) -> str:
    # one gateway beside the head node: sessions in its own file, no Redis
    gateway = ["kvwise", "serve", *gateway_args(spec, [f"http://HEAD_IP:{VLLM_PORT}"], None)]
    return f"""# {spec.model_id} on {num_nodes} node(s) x {gpus_per_node} GPU(s) with Ray

vLLM {spec.vllm_version}, tensor parallel {spec.tensor_parallel_size} inside a node, pipeline
parallel {spec.pipeline_parallel_size} across nodes, one engine for the whole cluster.

1. On every node: the same vLLM release (`pip install vllm=={spec.vllm_version}` or the image
   `vllm/vllm-openai:v{spec.vllm_version}`), the same model cache path, and `ray` from it.
2. Head node: `./launch.sh head`
3. Every other node: `./launch.sh worker HEAD_IP`
4. Check `ray status` shows {num_nodes * gpus_per_node} GPUs, then on the head: `./launch.sh serve`

```
{serve_line(spec)}
```

5. The gateway in front of it (any machine that reaches the head):

```
{" ".join(shlex.quote(w) for w in gateway)}
```

Not modelled: the network interface NCCL and Gloo pick on nodes with several
(`NCCL_SOCKET_IFNAME`, `GLOO_SOCKET_IFNAME`); set them before `ray start` if needed.
"""


def render_ray(spec: DeploySpec, gpus_per_node: int, num_nodes: int) -> Rendered:
    artefacts = (
        Artefact("launch.sh", launch_script(spec, gpus_per_node), is_executable=True),
        Artefact("README.md", readme(spec, gpus_per_node, num_nodes)),
    )
    steps = (
        "copy launch.sh to every node",
        "head node: ./launch.sh head",
        *(["each other node: ./launch.sh worker HEAD_IP"] if num_nodes > 1 else []),
        "head node: ./launch.sh serve",
    )
    return Rendered(artefacts, steps)
