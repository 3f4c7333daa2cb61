"""The TUI's widgets, one module each; they render what they are handed and post what the user did."""
