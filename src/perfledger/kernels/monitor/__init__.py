"""Monitors: GPU and host sampling and interference detection during a measurement."""
