"""Recipes: advlock in the frameworks of its users, each run by tests/test_recipes.py."""
