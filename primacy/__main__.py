from primacy.cli import main

main()
