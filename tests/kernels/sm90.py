"""Triton kernels compiled for an H100/H200 (sm_90) with no GPU, for the tests that read their
PTX (what comes before ``griddepcontrol.wait``, a barrier between loads and stores).

The compiler runs in a child process: the CPU tests' interpreter (``TRITON_INTERPRET=1``) has
none.
"""

from __future__ import annotations

import os
import subprocess
import sys

from sweep.common.env import REPO

_HEAD = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


def ptx(k, sig, const, num_warps=4, num_stages=3):
    sig = dict(sig)
    sig.update(dict.fromkeys(const, "constexpr"))
    src = ASTSource(fn=k, signature=sig,
                    constexprs={(k.arg_names.index(n),): v for n, v in const.items()})
    print(triton.compile(src, target=GPUTarget("cuda", 90, 32),
                         options=dict(num_warps=num_warps, num_stages=num_stages)).asm["ptx"])
    print("@@@@")
"""


def sm90_ptx(body: str) -> list[str]:
    """The PTX of each ``ptx(kernel, signature, constexprs, num_warps, num_stages)`` call that
    ``body`` (Python source, run after ``_HEAD``) makes, in order.

    Raises:
        AssertionError: the child failed (its stderr's tail in the message).
    """
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", _HEAD + body], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split("@@@@\n")[:-1]
