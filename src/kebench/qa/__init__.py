"""From mined rules to the consequences of an edit and the questions that test them."""
