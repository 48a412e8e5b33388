from jacbench.run.app import main

main()
