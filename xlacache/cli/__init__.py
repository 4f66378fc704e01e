"""The `xlacache` command line: store commands (inspect, stats, prune, ...) and `serve`."""
