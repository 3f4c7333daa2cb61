"""The TUI's screens, one module each: the main view, the message view and the help."""
