from ibqos.cli import main

main()
