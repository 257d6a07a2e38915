"""The discrete-event serving simulator: speculation under load (DESIGN.md, issue 12)."""
