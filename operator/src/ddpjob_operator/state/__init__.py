"""The shared types every step reads: a DDPJob's spec and status as typed values, its phases and conditions, how often
status is written, what one pass observed and decided (plan), and the ownership contracts of its children."""
