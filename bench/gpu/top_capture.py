# Runs `gputrace top` in a pseudo-terminal of 120x40 (or 80x24), feeds its
# output to a terminal emulator (pyte) and prints the screen after N seconds.
# KEYS (environment, optional): keys typed halfway, e.g. KEYS=$'\t\t\t' for
# the GEMMs pane.
import os, pty, select, sys, time, signal
import pyte
cols, rows, secs, argv = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
screen = pyte.Screen(cols, rows); stream = pyte.ByteStream(screen)
pid, fd = pty.fork()
if pid == 0:
    os.environ["COLUMNS"], os.environ["LINES"], os.environ["TERM"] = str(cols), str(rows), "xterm-256color"
    os.execvp(argv[0], argv)
import fcntl, termios, struct
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
end = time.time() + secs
keys = os.environ.get("KEYS", "").encode()
half = time.time() + secs / 2
while time.time() < end:
    if keys and time.time() >= half:
        os.write(fd, keys)
        keys = b""
    r, _, _ = select.select([fd], [], [], 0.1)
    if r:
        try: stream.feed(os.read(fd, 65536))
        except OSError: break
print("\n".join(line.rstrip() for line in screen.display))
os.write(fd, b"q")
t = time.time()
while time.time() < t + 3:
    r, _, _ = select.select([fd], [], [], 0.1)
    if r:
        try: os.read(fd, 65536)
        except OSError: break
try: os.kill(pid, signal.SIGTERM)
except ProcessLookupError: pass
