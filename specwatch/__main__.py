from specwatch.cli import main

main()
