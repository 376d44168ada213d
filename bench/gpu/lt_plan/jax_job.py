"""A JAX loop of one batched bf16 matmul (4x256x2048 @ 4x2048x512),
compiled and run before gputrace attaches; after W/go, 200 more calls.
XLA_FLAGS in run_jax.sh make XLA use cuBLASLt rather than Triton.

    python3 jax_job.py W
"""
import os
import sys
import time

import jax
import jax.numpy as jnp

W = sys.argv[1]
k1, k2 = jax.random.split(jax.random.PRNGKey(0))
a = jax.random.normal(k1, (4, 256, 2048), jnp.bfloat16)
b = jax.random.normal(k2, (4, 2048, 512), jnp.bfloat16)
f = jax.jit(lambda a, b: jnp.einsum("bmk,bkn->bmn", a, b))
for _ in range(20):
    f(a, b).block_until_ready()
open(f"{W}/job.pid", "w").write(str(os.getpid()))
while not os.path.exists(f"{W}/go"):
    time.sleep(0.1)
for _ in range(200):
    f(a, b).block_until_ready()
open(f"{W}/done", "w").write("")
print("jax done 200", jax.devices())
while not os.path.exists(f"{W}/stop"):
    time.sleep(0.1)
