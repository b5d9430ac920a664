"""Singleton components: each runs only while this host holds its lease, behind a fence."""
