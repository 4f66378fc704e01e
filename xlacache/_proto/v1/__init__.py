"""Generated from proto/ by `make proto` (tools/protogen.py); do not edit."""
