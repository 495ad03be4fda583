"""The auditor's replay: re-decides every recorded request and re-derives evidence."""
