"""One router per resource; main.py includes them all."""
