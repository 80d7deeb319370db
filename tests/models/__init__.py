"""Tests of kebench.models; ``shared`` holds the session's real model."""
