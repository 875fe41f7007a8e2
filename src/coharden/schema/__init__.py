"""Plain data types shared between layers (one small module each)."""
