"""A DDPJob's spec and status as typed values, its phases and conditions, and how often status is written."""
