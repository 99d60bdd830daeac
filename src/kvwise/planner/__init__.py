"""kvwise.planner."""
