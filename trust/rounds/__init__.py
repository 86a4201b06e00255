"""Rounds and the evidence logged in them: dissents, overrides and regret inference."""
