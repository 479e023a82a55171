"""The Riiid-size rehearsal projected to one GPU: what one GPU is assumed to do (Gpu), 03's
step and 04's loop projected from the FLOPs, bytes and op counts measured on the CPU, and
the report's table of each stage on one GPU (bench/rehearsal/report.py prints it)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.rehearsal.stages import MODEL_FORWARD


@dataclass(frozen=True)
class Gpu:
    """What the projection assumes of one GPU (an H200 SXM) and its host."""

    name: str = "H200 SXM"
    bf16_flops: float = 989e12  # dense bf16 tensor-core peak (NVIDIA's data sheet)
    flop_use: float = 0.35  # share reached by a d256 model's matmuls (small: 256-wide)
    memory_bandwidth: float = 4.8e12  # HBM3e, bytes/s
    bandwidth_use: float = 0.6  # share reached by eager element-wise kernels
    launch_s: float = 6e-6  # per aten op launched from Python, eager, no CUDA graphs
    host_link: float = 25e9  # bytes/s host to device: pinned memory, PCIe Gen5 x16 at half
    bytes_scale: float = 0.5  # bf16 activations: half of the fp32 bytes counted here


H200 = Gpu()  # what the report assumes


def project_training(train: dict, gpu: Gpu, cuda_plan: bool = True) -> dict:
    """Interactions/s of 03's step on one GPU: its arithmetic (the FLOPs counted on a
    step), its memory traffic (the bytes its aten ops read and write, at bf16) and its
    launches, added (eager mode overlaps little at this size). The step was counted as
    the CPU path runs it, in the CPU plan's parts of similar length; on CUDA 03 cuts the
    batch by the CUDA plan (`cuda_plan`: fewer, larger parts sized for the GPU's memory):
    FLOPs and bytes scale with the positions computed, launches with the parts."""
    cpu_parts = train["micro_batches"]
    scale, parts = 1.0, cpu_parts
    if cuda_plan:
        scale = train["cuda_padded_positions"] / train["cpu_padded_positions"]
        parts = train["cuda_parts"]
    flops = train["flops_per_interaction"] * scale
    traffic = train["bytes_per_interaction"] * gpu.bytes_scale * scale
    per_interaction = {
        "arithmetic": flops / (gpu.bf16_flops * gpu.flop_use),
        "memory": traffic / (gpu.memory_bandwidth * gpu.bandwidth_use),
        "launches": train["ops_per_step"]
        / cpu_parts
        * parts
        * gpu.launch_s
        / train["counted_interactions"],
    }
    bound = max(per_interaction, key=per_interaction.get)
    return {
        "interactions_per_s": 1.0 / sum(per_interaction.values()),
        "bound": bound,
        "per_interaction_s": per_interaction,
        "flops_per_interaction": flops,
        "positions_scale": scale,
        "parts": parts,
    }


def project_stream(profile: dict, gpu: Gpu) -> dict:
    """Rows/s of 04's loop on one GPU: the CPU's share outside the model stays as measured;
    the model's share becomes its launches and its arithmetic per group."""
    profiled = profile["profiled"]
    per_group_cpu = profiled["seconds"] / profiled["groups"]
    model_share = profile["where"][MODEL_FORWARD]["share"]
    rows_per_group = profile["rows_per_group"]
    model_gpu = max(
        profile["ops_per_group"] * gpu.launch_s,
        profile["flops_per_row"] * rows_per_group / (gpu.bf16_flops * gpu.flop_use),
    )
    per_group = per_group_cpu * (1 - model_share) + model_gpu
    return {
        "rows_per_s": rows_per_group / per_group,
        "cpu_s_per_group": per_group_cpu * (1 - model_share),
        "gpu_s_per_group": model_gpu,
    }


# ---------------------------------------------------------------------------------------
# the table: one row per stage, from the figures the stages kept


def preprocess_gpu_row(p: dict) -> list[str]:
    return [
        "01 preprocess",
        "CPU only (CSV parse, parquet, arrays): no GPU work",
        f"{p['rows'] / p['seconds']:,.0f} rows/s (as measured, 2 cores)",
        f"{p['seconds'] / 60:.1f} min",
    ]


def train_gpu_row(t: dict, gpu: Gpu, cuda_plan: bool) -> list[str]:
    """03's step as CUDA runs it (`cuda_plan`: the CUDA plan's parts) or in the CPU
    plan's parts."""
    projected = project_training(t, gpu, cuda_plan)
    epoch = t["epoch_interactions"] / projected["interactions_per_s"]
    per = projected["per_interaction_s"]
    how = (
        f"as 03 runs it on CUDA: {projected['parts']} length-sorted parts sized for the "
        f"GPU's memory ({projected['positions_scale']:.2f}x the positions of the CPU's)"
        if cuda_plan
        else f"in the CPU plan's {projected['parts']} length-sorted parts"
    )
    return [
        f"03 training step, d256 2+2, batch {t.get('batch_size', 512)}, {how}",
        f"{projected['flops_per_interaction'] / 1e9:.4f} GFLOP per interaction; "
        f"arithmetic {per['arithmetic'] * 1e9:.0f} ns, memory "
        f"{per['memory'] * 1e9:.0f} ns, launches {per['launches'] * 1e9:.0f} ns "
        "per interaction",
        f"{projected['interactions_per_s']:,.0f} interactions/s ({projected['bound']}-bound)",
        f"{epoch / 60:.1f} min per epoch",
    ]


def batches_gpu_row(b: dict, gpu: Gpu) -> list[str]:
    """The batch builder on the host: how many cores feed 1M interactions/s."""
    link = gpu.host_link / b["bytes_per_interaction"]
    per_core = b["one_process"]["interactions_per_s"]
    need = 1e6 / per_core
    return [
        "03's batch builder (host CPU)",
        f"{per_core:,.0f} interactions/s per core; {b['bytes_per_interaction']:.0f} B per "
        f"interaction over a {gpu.host_link / 1e9:.0f} GB/s host link",
        f"link: {link:,.0f} interactions/s; 1M/s needs {need:.1f} builder cores",
        "—",
    ]


def stream_gpu_row(pr: dict, s: dict, gpu: Gpu) -> list[str]:
    """04's loop from its profile (`pr`), over the whole stream of the stream stage (`s`)."""
    projected = project_stream(pr, gpu)
    whole = s["whole"]["question_rows"]
    return [
        "04 streaming, d256",
        f"{pr['flops_per_row'] / 1e6:.1f} MFLOP per row, {pr['ops_per_group']:,.0f} aten "
        f"ops per group of {pr['rows_per_group']:.0f} rows (the first "
        f"{pr.get('counted_groups', 50)} groups, cache builds included); CPU outside "
        f"the model {projected['cpu_s_per_group'] * 1e3:.1f} ms per group (cProfile "
        f"on), the model on the GPU {projected['gpu_s_per_group'] * 1e3:.1f} ms",
        f"{projected['rows_per_s']:,.0f} rows/s",
        f"{whole / projected['rows_per_s'] / 60:.1f} min for the stream's {whole:,} rows",
    ]


def gpu_rows(f: dict, gpu: Gpu) -> list[list[str]]:
    """Each stage on one GPU (and its host), projected from the measured figures `f`
    ({stage: its figures})."""
    rows = []
    if p := f.get("preprocess"):
        rows.append(preprocess_gpu_row(p))
    if t := f.get("train"):
        # figures of an older run have no CUDA plan: the CPU's parts only
        for cuda_plan in (True, False) if "cuda_parts" in t else (False,):
            rows.append(train_gpu_row(t, gpu, cuda_plan))
    if b := f.get("batches"):
        rows.append(batches_gpu_row(b, gpu))
    if (pr := f.get("profile")) and (s := f.get("stream")):
        rows.append(stream_gpu_row(pr, s, gpu))
    return rows
