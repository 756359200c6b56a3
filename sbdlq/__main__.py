from sbdlq.entry import main

main()
