from ibqos.cli.main import main

main()
