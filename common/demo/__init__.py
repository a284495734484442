"""Apart, on top: the offline demo (a packaged 135M model behind a local OpenAI-compatible server)."""
