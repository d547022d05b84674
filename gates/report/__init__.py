"""`gates report`: what it reads, checked first (inputs), and the static HTML page (page)."""
