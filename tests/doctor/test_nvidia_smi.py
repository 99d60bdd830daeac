"""nvidia-smi dumps: the current and the old table layout, and --query-gpu CSV."""

from __future__ import annotations

from kvwise.doctor.nvidia_smi import parse_nvidia_smi

MIB = 2**20

NEW_TABLE = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA GeForce RTX 4090        Off |   00000000:01:00.0  On |                  Off |
|  0%   45C    P8             20W /  450W |    1234MiB /  24564MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
| Processes:                                                                              |
|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |
|=========================================================================================|
|    0   N/A  N/A      1290      G   /usr/lib/xorg/Xorg                            812MiB |
|    0   N/A  N/A      2301      C   VLLM::EngineCore                            20310MiB |
+-----------------------------------------------------------------------------------------+
"""

OLD_TABLE = """\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 470.82.01    Driver Version: 470.82.01    CUDA Version: 11.4     |
|   0  GeForce RTX 3090    Off  | 00000000:01:00.0 Off |                  N/A |
| 30%   30C    P8    20W / 350W |  18000MiB / 24268MiB |      0%      Default |
|   1  GeForce RTX 3090    Off  | 00000000:02:00.0 Off |                  N/A |
| 30%   30C    P8    20W / 350W |      1MiB / 24268MiB |      0%      Default |
|    0      4412      C   python                                     17990MiB |
"""


def test_current_table_layout() -> None:
    smi = parse_nvidia_smi(NEW_TABLE)
    assert [(g.index, g.name, g.used_bytes, g.total_bytes) for g in smi.gpus] == [
        (0, "NVIDIA GeForce RTX 4090", 1234 * MIB, 24564 * MIB)
    ]
    assert [(p.pid, p.kind, p.name, p.used_bytes) for p in smi.processes] == [
        (1290, "G", "/usr/lib/xorg/Xorg", 812 * MIB),
        (2301, "C", "VLLM::EngineCore", 20310 * MIB),
    ]
    assert smi.processes[1].looks_like_vllm and not smi.processes[0].looks_like_vllm


def test_old_table_layout_with_two_gpus() -> None:
    smi = parse_nvidia_smi(OLD_TABLE)
    assert [(g.index, g.name, g.used_bytes) for g in smi.gpus] == [
        (0, "GeForce RTX 3090", 18000 * MIB),
        (1, "GeForce RTX 3090", 1 * MIB),
    ]
    assert [(p.gpu, p.pid, p.name) for p in smi.processes] == [(0, 4412, "python")]


def test_query_gpu_csv() -> None:
    smi = parse_nvidia_smi(
        "index, name, memory.used [MiB], memory.total [MiB]\n"
        "0, NVIDIA A100-SXM4-80GB, 18000 MiB, 81920 MiB\n"
    )
    assert [(g.index, g.name, g.used_bytes, g.total_bytes) for g in smi.gpus] == [
        (0, "NVIDIA A100-SXM4-80GB", 18000 * MIB, 81920 * MIB)
    ]


def test_text_without_a_dump_is_empty() -> None:
    assert parse_nvidia_smi("no GPUs here | just | pipes |").is_empty
