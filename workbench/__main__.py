"""`python -m workbench`: the `workbench` command."""

from workbench.cli import main

if __name__ == "__main__":
    main(prog_name="workbench")
