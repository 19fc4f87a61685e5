"""``aow-export CHECKPOINT_OR_RUN_DIR [-o policy.onnx]``: checkpoint -> verified ONNX policy + policy.yaml."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from aow_policy.robot import ContractError, load_robot
from export.checkpoint_source import ExportError
from export.onnx_export import DEFAULT_OPSET, MIN_OPSET
from export.pipeline import export_policy
from export.verify import DEFAULT_TOLERANCE


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aow-export",
        description=(
            "Export a training checkpoint's deterministic policy (observation normalizer included) to ONNX, "
            "verify it against PyTorch, and write the policy contract into the ONNX metadata and a sidecar "
            "policy.yaml. Nothing is written unless verification passes."
        ),
    )
    p.add_argument("source", help="checkpoint file (model_<iteration>.pt) or run directory (the latest is used)")
    p.add_argument(
        "-o", "--output", default=None, help="output .onnx file (default: policy.onnx beside the checkpoint)"
    )
    p.add_argument("--robot", default=None, help="robot contract YAML (default: the aow_policy package's aow_c.yaml)")
    p.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset, {MIN_OPSET} or newer")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="max |onnx - torch| allowed")
    p.add_argument("--num-random", type=int, default=1000, help="random observations to verify on")
    p.add_argument(
        "--rollout-steps",
        type=int,
        default=50,
        help="steps of a rollout of the checkpoint's task whose observations are verified too (0: none)",
    )
    p.add_argument("--rollout-envs", type=int, default=4, help="environments in that rollout")
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.num_random < 1:
        print("aow-export: error: --num-random must be at least 1", file=sys.stderr)
        return 2
    try:
        robot = load_robot(args.robot)
        export_policy(
            args.source,
            args.output,
            robot,
            opset=args.opset,
            tolerance=args.tolerance,
            num_random=args.num_random,
            rollout_steps=args.rollout_steps,
            rollout_envs=args.rollout_envs,
            seed=args.seed,
        )
    except (ExportError, ContractError) as e:
        print(f"aow-export: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
