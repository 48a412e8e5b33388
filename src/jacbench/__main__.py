from jacbench.app import main

main()
