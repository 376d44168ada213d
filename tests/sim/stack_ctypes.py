"""Known Python call chains into the simulated libcuda through ctypes, for
the call-stack tests (`--stacks`).  README.md is the contract; the tests
find the lines below by their `# line:` markers.

Usage: python3 stack_ctypes.py SIM_DIR STEPS [--wait] [--linger MS]
  --wait: print "ready" and wait for a line on stdin before the steps, and
          after "done", for another line before exiting;
  --linger MS: sleep MS milliseconds before exiting (a tracer resolves
          stacks while the process lives).
Prints "done steps=STEPS" after the steps.
"""
import ctypes
import os
import sys
import time

cuda = ctypes.CDLL(os.path.join(sys.argv[1], "libcuda.so.1"))
cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
cuda.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
FUNCTION = ctypes.c_void_p(0x5EED)


def launch_kernel(blocks):
    return cuda.cuLaunchKernel(FUNCTION, blocks, 1, 1, 32, 1, 1, 0, None, None, None)  # line: launch


def synchronize():
    return cuda.cuStreamSynchronize(None)  # line: sync


class Trainer:
    def step(self, i):
        r = launch_kernel(1 + i % 2)  # line: step-launch
        r |= synchronize()  # line: step-sync
        return r


def main():
    if cuda.cuInit(0) != 0:
        sys.exit("cuInit failed")
    steps = int(sys.argv[2])
    wait = "--wait" in sys.argv[3:]
    linger_ms = int(sys.argv[sys.argv.index("--linger") + 1]) if "--linger" in sys.argv else 0
    if wait:
        print("ready", flush=True)
        sys.stdin.readline()
    trainer = Trainer()
    for i in range(steps):
        if trainer.step(i) != 0:  # line: main-step
            sys.exit("a call failed")
    print(f"done steps={steps}", flush=True)
    if wait:
        sys.stdin.readline()
    time.sleep(linger_ms / 1000)


main()  # line: module
