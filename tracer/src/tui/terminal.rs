//! The terminal while `top` runs: raw mode and the alternate screen, put
//! back on every way out (return, error, panic), and stderr captured so
//! that messages do not scribble over the screen.

use std::io::{BufRead, BufReader, Stdout};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::Once;

use crossterm::cursor::{Hide, Show};
use crossterm::execute;
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;

/// The real stderr while it is captured (-1: not captured).
static SAVED_STDERR: AtomicI32 = AtomicI32::new(-1);

/// Puts the terminal back as the shell had it.
pub(crate) fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(std::io::stdout(), LeaveAlternateScreen, Show);
}

fn restore_stderr() {
    let saved = SAVED_STDERR.swap(-1, Ordering::SeqCst);
    if saved >= 0 {
        // SAFETY: `saved` is a descriptor we dup'ed and still own; dup2 onto 2 is atomic.
        unsafe {
            libc::dup2(saved, 2);
            libc::close(saved);
        }
    }
}

fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            restore_stderr();
            previous(info);
        }));
    });
}

/// The terminal in raw mode on the alternate screen; dropping it restores both.
pub(crate) struct Screen {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Screen {
    pub(crate) fn enter() -> std::io::Result<Screen> {
        install_panic_hook();
        enable_raw_mode()?;
        let guard = Restore;
        execute!(std::io::stdout(), EnterAlternateScreen, Hide)?;
        let terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
        std::mem::forget(guard);
        Ok(Screen { terminal })
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Restores on drop (for a failure half-way through entering).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        restore();
    }
}

/// Whatever is written to stderr (by gputrace or a child) while the screen
/// is up, line by line; the real stderr comes back on drop.
pub(crate) struct StderrCapture {
    lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl StderrCapture {
    pub(crate) fn start() -> std::io::Result<StderrCapture> {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: pipe2 just returned these descriptors; we own them.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: dup of our own stderr.
        let saved = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) };
        if saved < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors are open; dup2 replaces stderr atomically.
        if unsafe { libc::dup2(write.as_raw_fd(), 2) } < 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: closing the copy we just made.
            unsafe { libc::close(saved) };
            return Err(e);
        }
        SAVED_STDERR.store(saved, Ordering::SeqCst);
        drop(write);
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("gputrace-stderr".into())
            .spawn(move || {
                for line in BufReader::new(std::fs::File::from(read)).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })?;
        Ok(StderrCapture {
            lines: rx,
            seen: Vec::new(),
        })
    }

    /// The newest line written since the last call, if any.
    pub(crate) fn latest(&mut self) -> Option<String> {
        let before = self.seen.len();
        self.seen.extend(self.lines.try_iter());
        (self.seen.len() > before)
            .then(|| self.seen.last().cloned())
            .flatten()
    }
}

impl Drop for StderrCapture {
    fn drop(&mut self) {
        restore_stderr();
        // Say again, where it can be read, what was said meanwhile.
        self.seen.extend(self.lines.try_iter());
        for line in self.seen.iter().rev().take(20).rev() {
            crate::log::say_raw(format_args!("{line}"));
        }
    }
}
