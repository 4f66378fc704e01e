"""Generated from proto/ by `python -m xlacache.server.protogen`; do not edit."""
