//! Keys to [`Action`]s. While the filter line is open, keys type into it.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::tui::app::Action;
use crate::tui::app::App;

pub(crate) fn action_for(key: &KeyEvent, app: &App) -> Option<Action> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    if key.modifiers.contains(KeyModifiers::CONTROL) {
        return match key.code {
            KeyCode::Char('c') | KeyCode::Char('d') => Some(Action::Quit),
            KeyCode::Char('u') if app.editing_filter => Some(Action::FilterClear),
            _ => None,
        };
    }
    if app.editing_filter {
        return match key.code {
            KeyCode::Enter | KeyCode::Tab => Some(Action::FilterKeep),
            KeyCode::Esc => Some(Action::FilterClear),
            KeyCode::Backspace => Some(Action::FilterBackspace),
            KeyCode::Char(c) => Some(Action::FilterChar(c)),
            KeyCode::Up => Some(Action::Up),
            KeyCode::Down => Some(Action::Down),
            _ => None,
        };
    }
    if app.help {
        // Any key closes the help; q and Ctrl-C still quit.
        return Some(match key.code {
            KeyCode::Char('q') => Action::Quit,
            _ => Action::CloseHelp,
        });
    }
    Some(match key.code {
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Up | KeyCode::Char('k') => Action::Up,
        KeyCode::Down | KeyCode::Char('j') => Action::Down,
        KeyCode::PageUp => Action::PageUp,
        KeyCode::PageDown => Action::PageDown,
        KeyCode::Home | KeyCode::Char('g') => Action::Top,
        KeyCode::End | KeyCode::Char('G') => Action::Bottom,
        KeyCode::Enter | KeyCode::Tab => Action::NextPane,
        KeyCode::BackTab => Action::PrevPane,
        KeyCode::Char('s') => Action::CycleSort,
        KeyCode::Char('/') => Action::StartFilter,
        KeyCode::Char('p') | KeyCode::Char(' ') => Action::TogglePause,
        KeyCode::Char('?') | KeyCode::Char('h') => Action::ToggleHelp,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::app::Scope;
    use crate::tui::gpu::GpuStatus;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn keys_by_mode() {
        let mut app = App::new(Scope::default(), GpuStatus::Pending, 1);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(
            action_for(&key(KeyCode::Char('j')), &app),
            Some(Action::Down)
        );
        assert_eq!(action_for(&key(KeyCode::Esc), &app), Some(Action::Quit));
        assert_eq!(action_for(&ctrl_c, &app), Some(Action::Quit));
        assert_eq!(action_for(&key(KeyCode::Char('x')), &app), None);
        app.apply(Action::StartFilter);
        assert_eq!(
            action_for(&key(KeyCode::Char('q')), &app),
            Some(Action::FilterChar('q'))
        );
        assert_eq!(
            action_for(&key(KeyCode::Esc), &app),
            Some(Action::FilterClear)
        );
        assert_eq!(action_for(&ctrl_c, &app), Some(Action::Quit));
        app.apply(Action::FilterKeep);
        app.apply(Action::ToggleHelp);
        assert_eq!(
            action_for(&key(KeyCode::Esc), &app),
            Some(Action::CloseHelp)
        );
        assert_eq!(
            action_for(&key(KeyCode::Char('q')), &app),
            Some(Action::Quit)
        );
    }
}
