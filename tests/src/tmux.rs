//! A terminal for the tests of `gputrace top`: a tmux server of the test's
//! own (its own socket), whose one pane is read and typed into.

use std::process::Command;
use std::time::{Duration, Instant};

/// A tmux server of our own (its own socket), removed on drop.
pub struct Pane {
    socket: String,
}

impl Pane {
    pub fn start(name: &str, width: u16, height: u16) -> Pane {
        let pane = Pane {
            socket: format!("gputrace-test-{}-{name}", std::process::id()),
        };
        let (w, h) = (width.to_string(), height.to_string());
        pane.tmux(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            &w,
            "-y",
            &h,
            "env PS1='$ ' sh",
        ]);
        // A lone Esc must reach the program at once, not wait for a sequence.
        pane.tmux(&["set-option", "-s", "escape-time", "0"]);
        pane
    }

    pub fn tmux(&self, args: &[&str]) -> String {
        // -u: UTF-8 whatever the locale (the screen has ✗ and sparklines).
        let out = Command::new("tmux")
            .args(["-u", "-f", "/dev/null", "-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux is installed (cargo xtask setup installs it)");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn send(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Types `text` literally.
    pub fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "top", "-l", text]);
    }

    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "top"])
    }

    pub fn alternate_screen(&self) -> bool {
        self.tmux(&["display-message", "-p", "-t", "top", "#{alternate_on}"])
            .trim()
            == "1"
    }

    /// Polls the screen until `ok` holds; panics with the screen after `timeout`.
    pub fn wait_for(&self, what: &str, timeout: Duration, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!("waited {timeout:?} for {what}; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}
