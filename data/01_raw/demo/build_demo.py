#!/usr/bin/env python3
"""Build the kebench demo data: a small knowledge graph of true facts and a set
of MQuAKE-style single-edit cases.

Plain Python 3.11, standard library only. Run from anywhere:

    python3 data/01_raw/demo/build_demo.py

It (re)writes, next to this file:

* ``kg.nt``            -- N-Triples, DBpedia-style IRIs, sorted, one triple per line
* ``edit_cases.json``  -- a JSON list of edit cases in MQuAKE's (CF-3k) schema

All facts below were written by hand from general knowledge of well-known
public facts (state of 2024); see ``docs/demo_data.md``. Entity keys are
DBpedia resource names (``http://dbpedia.org/resource/<key>``); the rdfs:label
of an entity is its key with underscores replaced by spaces unless an explicit
label is given in ``LABELS``.

The edit cases are *derived* from the tables: for every case only the edited
relation, subject, new object and the other hop of the 2-hop chain are given;
old/new answers, single hops and labelled triples are computed from the graph,
so they cannot drift apart from kg.nt.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent

RES = "http://dbpedia.org/resource/"
ONT = "http://dbpedia.org/ontology/"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"

# --------------------------------------------------------------------------
# Continents, languages, currencies
# --------------------------------------------------------------------------

CONTINENTS = "Africa Asia Europe North_America South_America Oceania".split()

# key -> label
LANGUAGES = {
    "English_language": "English",
    "French_language": "French",
    "German_language": "German",
    "Spanish_language": "Spanish",
    "Italian_language": "Italian",
    "Portuguese_language": "Portuguese",
    "Dutch_language": "Dutch",
    "Polish_language": "Polish",
    "Czech_language": "Czech",
    "Swedish_language": "Swedish",
    "Norwegian_language": "Norwegian",
    "Danish_language": "Danish",
    "Finnish_language": "Finnish",
    "Greek_language": "Greek",
    "Russian_language": "Russian",
    "Ukrainian_language": "Ukrainian",
    "Turkish_language": "Turkish",
    "Serbian_language": "Serbian",
    "Hungarian_language": "Hungarian",
    "Icelandic_language": "Icelandic",
    "Irish_language": "Irish",
    "Romansh_language": "Romansh",
    "Standard_Chinese": "Standard Chinese",
    "Japanese_language": "Japanese",
    "Korean_language": "Korean",
    "Hindi": "Hindi",
    "Indonesian_language": "Indonesian",
    "Thai_language": "Thai",
    "Vietnamese_language": "Vietnamese",
    "Filipino_language": "Filipino",
    "Arabic": "Arabic",
    "Amharic": "Amharic",
    "Swahili_language": "Swahili",
    "Afrikaans": "Afrikaans",
    "Zulu_language": "Zulu",
    "Xhosa_language": "Xhosa",
    "Māori_language": "Māori",
    "Urdu": "Urdu",
    "Bengali_language": "Bengali",
    "Persian_language": "Persian",
}

# Currencies: label = key with spaces (all listed in COUNTRIES below).

# --------------------------------------------------------------------------
# Countries
#   key: (capital(s), official language(s), continent(s), currency,
#         largest city or "", head of state or "")
#   Multiple values are separated by "|".
#   officialLanguage: de jure official language(s) of the state, or the de facto
#     national language where no de jure official language exists (US in 2024,
#     UK, Mexico, Argentina, Chile, Japan, Australia). Where a country has many
#     official languages only the main ones are listed (never a false one).
#   leader: head of state who held office for the whole of calendar year 2024.
#     Countries whose head of state changed during 2024 or in January 2025
#     (e.g. US, Mexico, Indonesia, Iceland, Hungary, Finland, Denmark, Senegal)
#     are deliberately left without a leader.
#   capital: omitted for Switzerland (no de jure capital; Bern is the "federal
#     city") and Indonesia (capital relocation to Nusantara in progress).
# --------------------------------------------------------------------------

COUNTRIES = {
    # North America
    "United_States": ("Washington,_D.C.", "English_language", "North_America",
                      "United_States_dollar", "New_York_City", ""),
    "Canada": ("Ottawa", "English_language|French_language", "North_America",
               "Canadian_dollar", "Toronto", "Charles_III"),
    "Mexico": ("Mexico_City", "Spanish_language", "North_America",
               "Mexican_peso", "Mexico_City", ""),
    "Cuba": ("Havana", "Spanish_language", "North_America",
             "Cuban_peso", "Havana", "Miguel_Díaz-Canel"),
    # South America
    "Brazil": ("Brasília", "Portuguese_language", "South_America",
               "Brazilian_real", "São_Paulo", "Luiz_Inácio_Lula_da_Silva"),
    "Argentina": ("Buenos_Aires", "Spanish_language", "South_America",
                  "Argentine_peso", "Buenos_Aires", "Javier_Milei"),
    "Chile": ("Santiago", "Spanish_language", "South_America",
              "Chilean_peso", "Santiago", "Gabriel_Boric"),
    "Colombia": ("Bogotá", "Spanish_language", "South_America",
                 "Colombian_peso", "Bogotá", "Gustavo_Petro"),
    "Peru": ("Lima", "Spanish_language", "South_America",
             "Peruvian_sol", "Lima", ""),
    # Europe
    "United_Kingdom": ("London", "English_language", "Europe",
                       "Pound_sterling", "London", "Charles_III"),
    "Republic_of_Ireland": ("Dublin", "Irish_language|English_language", "Europe",
                            "Euro", "Dublin", "Michael_D._Higgins"),
    "France": ("Paris", "French_language", "Europe",
               "Euro", "Paris", "Emmanuel_Macron"),
    "Germany": ("Berlin", "German_language", "Europe",
                "Euro", "Berlin", "Frank-Walter_Steinmeier"),
    "Italy": ("Rome", "Italian_language", "Europe",
              "Euro", "Rome", "Sergio_Mattarella"),
    "Spain": ("Madrid", "Spanish_language", "Europe",
              "Euro", "Madrid", "Felipe_VI"),
    "Portugal": ("Lisbon", "Portuguese_language", "Europe",
                 "Euro", "Lisbon", "Marcelo_Rebelo_de_Sousa"),
    "Netherlands": ("Amsterdam", "Dutch_language", "Europe",
                    "Euro", "Amsterdam", "Willem-Alexander_of_the_Netherlands"),
    "Belgium": ("Brussels", "Dutch_language|French_language|German_language", "Europe",
                "Euro", "", "Philippe_of_Belgium"),
    "Switzerland": ("", "German_language|French_language|Italian_language|Romansh_language",
                    "Europe", "Swiss_franc", "Zürich", ""),
    "Austria": ("Vienna", "German_language", "Europe",
                "Euro", "Vienna", "Alexander_Van_der_Bellen"),
    "Poland": ("Warsaw", "Polish_language", "Europe",
               "Polish_złoty", "Warsaw", "Andrzej_Duda"),
    "Czech_Republic": ("Prague", "Czech_language", "Europe",
                       "Czech_koruna", "Prague", "Petr_Pavel"),
    "Sweden": ("Stockholm", "Swedish_language", "Europe",
               "Swedish_krona", "Stockholm", "Carl_XVI_Gustaf"),
    "Norway": ("Oslo", "Norwegian_language", "Europe",
               "Norwegian_krone", "Oslo", "Harald_V"),
    "Denmark": ("Copenhagen", "Danish_language", "Europe",
                "Danish_krone", "Copenhagen", ""),
    "Finland": ("Helsinki", "Finnish_language|Swedish_language", "Europe",
                "Euro", "Helsinki", ""),
    "Iceland": ("Reykjavík", "Icelandic_language", "Europe",
                "Icelandic_króna", "Reykjavík", ""),
    "Greece": ("Athens", "Greek_language", "Europe",
               "Euro", "Athens", ""),
    "Hungary": ("Budapest", "Hungarian_language", "Europe",
                "Hungarian_forint", "Budapest", ""),
    "Serbia": ("Belgrade", "Serbian_language", "Europe",
               "Serbian_dinar", "Belgrade", "Aleksandar_Vučić"),
    "Ukraine": ("Kyiv", "Ukrainian_language", "Europe",
                "Ukrainian_hryvnia", "Kyiv", "Volodymyr_Zelenskyy"),
    "Russia": ("Moscow", "Russian_language", "Europe|Asia",
               "Russian_ruble", "Moscow", "Vladimir_Putin"),
    "Turkey": ("Ankara", "Turkish_language", "Asia|Europe",
               "Turkish_lira", "Istanbul", "Recep_Tayyip_Erdoğan"),
    # Asia
    "China": ("Beijing", "Standard_Chinese", "Asia",
              "Renminbi", "Shanghai", "Xi_Jinping"),
    "Japan": ("Tokyo", "Japanese_language", "Asia",
              "Japanese_yen", "Tokyo", "Naruhito"),
    "South_Korea": ("Seoul", "Korean_language", "Asia",
                    "South_Korean_won", "Seoul", ""),
    "India": ("New_Delhi", "Hindi|English_language", "Asia",
              "Indian_rupee", "", "Droupadi_Murmu"),
    "Pakistan": ("Islamabad", "Urdu|English_language", "Asia",
                 "Pakistani_rupee", "Karachi", ""),
    "Bangladesh": ("Dhaka", "Bengali_language", "Asia",
                   "Bangladeshi_taka", "Dhaka", ""),
    "Indonesia": ("", "Indonesian_language", "Asia",
                  "Indonesian_rupiah", "Jakarta", ""),
    "Thailand": ("Bangkok", "Thai_language", "Asia",
                 "Thai_baht", "Bangkok", "Vajiralongkorn"),
    "Vietnam": ("Hanoi", "Vietnamese_language", "Asia",
                "Vietnamese_đồng", "Ho_Chi_Minh_City", ""),
    "Philippines": ("Manila", "Filipino_language|English_language", "Asia",
                    "Philippine_peso", "Quezon_City", "Bongbong_Marcos"),
    "Iran": ("Tehran", "Persian_language", "Asia",
             "Iranian_rial", "Tehran", ""),
    "Saudi_Arabia": ("Riyadh", "Arabic", "Asia",
                     "Saudi_riyal", "Riyadh", "Salman_of_Saudi_Arabia"),
    "Jordan": ("Amman", "Arabic", "Asia",
               "Jordanian_dinar", "Amman", "Abdullah_II_of_Jordan"),
    # Africa
    "Egypt": ("Cairo", "Arabic", "Africa",
              "Egyptian_pound", "Cairo", "Abdel_Fattah_el-Sisi"),
    "Morocco": ("Rabat", "Arabic", "Africa",
                "Moroccan_dirham", "Casablanca", "Mohammed_VI_of_Morocco"),
    "Nigeria": ("Abuja", "English_language", "Africa",
                "Nigerian_naira", "Lagos", "Bola_Tinubu"),
    "Ghana": ("Accra", "English_language", "Africa",
              "Ghanaian_cedi", "", ""),
    "Côte_d'Ivoire": ("Yamoussoukro", "French_language", "Africa",
                      "West_African_CFA_franc", "Abidjan", "Alassane_Ouattara"),
    "Senegal": ("Dakar", "French_language", "Africa",
                "West_African_CFA_franc", "Dakar", ""),
    "Ethiopia": ("Addis_Ababa", "Amharic", "Africa",
                 "Ethiopian_birr", "Addis_Ababa", ""),
    "Kenya": ("Nairobi", "English_language|Swahili_language", "Africa",
              "Kenyan_shilling", "Nairobi", "William_Ruto"),
    "South_Africa": ("Pretoria|Cape_Town|Bloemfontein",
                     "English_language|Afrikaans|Zulu_language|Xhosa_language", "Africa",
                     "South_African_rand", "Johannesburg", "Cyril_Ramaphosa"),
    # Oceania
    "Australia": ("Canberra", "English_language", "Oceania",
                  "Australian_dollar", "", "Charles_III"),
    "New_Zealand": ("Wellington", "English_language|Māori_language", "Oceania",
                    "New_Zealand_dollar", "Auckland", "Charles_III"),
}

# --------------------------------------------------------------------------
# Cities (any settlement, typed dbo:City), grouped by dbo:country.
# Capitals, birth/death places, headquarters cities and a few extra cities
# used as counterfactual edit targets.
# --------------------------------------------------------------------------

CITIES = {
    "United_States": """
        Washington,_D.C. New_York_City Los_Angeles Chicago Houston Honolulu
        Scranton,_Pennsylvania Hammonton,_New_Jersey Hope,_Arkansas
        New_Haven,_Connecticut Midland,_Texas Concord,_California
        White_Plains,_New_York Braintree,_Massachusetts Akron,_Ohio Las_Vegas
        Saginaw,_Michigan Kosciusko,_Mississippi Brookline,_Massachusetts Dallas
        Memphis,_Tennessee Hyde_Park,_New_York Mobile,_Alabama Seattle
        San_Francisco Palo_Alto,_California San_Jose,_California
        East_Lansing,_Michigan Albuquerque,_New_Mexico Omaha,_Nebraska
        Burbank,_California Dearborn,_Michigan Kingfisher,_Oklahoma
        Little_Rock,_Arkansas Portland,_Oregon Boston Burlington,_Iowa
        Austin,_Texas Princeton,_New_Jersey Atlanta Cupertino,_California
        Redmond,_Washington Mountain_View,_California Menlo_Park,_California
        Santa_Clara,_California Bentonville,_Arkansas Beaverton,_Oregon
        Armonk,_New_York Los_Gatos,_California
    """,
    "Canada": "Ottawa Toronto Montreal Charlemagne,_Quebec London,_Ontario Waterloo,_Ontario",
    "Mexico": "Mexico_City Guadalajara Guanajuato_City",
    "Cuba": "Havana Placetas Birán",
    "Brazil": "Brasília São_Paulo Rio_de_Janeiro Três_Corações Horizontina Mogi_das_Cruzes",
    "Argentina": "Buenos_Aires Rosario Lanús Tigre,_Buenos_Aires",
    "Chile": "Santiago Punta_Arenas Parral,_Chile",
    "Colombia": "Bogotá Barranquilla Ciénaga_de_Oro Aracataca",
    "Peru": "Lima Arequipa",
    "United_Kingdom": """
        London Edinburgh Reading,_Berkshire Harlow Bury,_Greater_Manchester Yate
        Shrewsbury Oxford Cambridge Wilmslow Halifax,_West_Yorkshire Windsor,_Berkshire
    """,
    "Republic_of_Ireland": "Dublin Limerick",
    "France": """
        Paris Amiens Marseille Lyon Roubaix Besançon Lille Saumur Mougins
        Auvers-sur-Oise Clichy,_Hauts-de-Seine Clermont-Ferrand Courbevoie
        Boulogne-Billancourt
    """,
    "Germany": """
        Berlin Hamburg Munich Detmold Osnabrück Hürth Heppenheim Würzburg Mannheim
        Herzogenaurach Ulm Trier Bonn Frankfurt Weimar Koblenz Heidelberg Wolfsburg
        Walldorf Stuttgart
    """,
    "Italy": "Rome Palermo Modena Urbino Piacenza Turin Maranello Sanremo Bologna",
    "Spain": "Madrid Oviedo Manacor Alcobendas Las_Palmas Málaga Reus Barcelona Arteixo",
    "Portugal": "Lisbon Funchal Setúbal",
    "Netherlands": "Amsterdam Utrecht Zundert The_Hague Veldhoven",
    "Belgium": "Brussels Uccle Hasselt",
    "Switzerland": "Bern Zürich Basel Geneva Vevey",
    "Austria": "Vienna Salzburg Thal,_Austria",
    "Poland": "Warsaw Kraków Pruszków",
    "Czech_Republic": "Prague Planá",
    "Sweden": "Stockholm Solna Malmö Gothenburg",
    "Norway": "Oslo Tønsberg",
    "Denmark": "Copenhagen Odense Billund Bagsværd",
    "Finland": "Helsinki Espoo",
    "Iceland": "Reykjavík",
    "Greece": "Athens",
    "Hungary": "Budapest Székesfehérvár",
    "Serbia": "Belgrade",
    "Ukraine": "Kyiv Kryvyi_Rih",
    "Russia": "Moscow Saint_Petersburg Votkinsk",
    "Turkey": "Ankara Istanbul",
    "China": "Beijing Shanghai Hangzhou Shenzhen Yangquan",
    "Japan": "Tokyo Kyoto Ōshū,_Iwate Kashihara,_Nara Toyota,_Aichi",
    "South_Korea": "Seoul Suwon Chuncheon Daegu",
    "India": """
        New_Delhi Delhi Mumbai Bangalore Madurai Hyderabad Vadnagar Porbandar
        Chorwad Ayodhya
    """,
    "Pakistan": "Islamabad Karachi Mingora",
    "Bangladesh": "Dhaka Chittagong",
    "Indonesia": "Jakarta Surakarta",
    "Thailand": "Bangkok",
    "Vietnam": "Hanoi Ho_Chi_Minh_City",
    "Philippines": "Manila Quezon_City",
    "Iran": "Tehran",
    "Saudi_Arabia": "Riyadh Dhahran",
    "Jordan": "Amman",
    "Egypt": "Cairo",
    "Morocco": "Rabat Casablanca",
    "Nigeria": "Abuja Lagos Kano Enugu Abeokuta Port_Harcourt",
    "Ghana": "Accra Kumasi",
    "Côte_d'Ivoire": "Yamoussoukro Abidjan Dimbokro",
    "Senegal": "Dakar",
    "Ethiopia": "Addis_Ababa",
    "Kenya": "Nairobi",
    "South_Africa": "Pretoria Cape_Town Bloemfontein Johannesburg Klerksdorp Benoni Mvezo",
    "Australia": "Canberra Sydney Melbourne Dalby,_Queensland",
    "New_Zealand": "Wellington Auckland",
}

# --------------------------------------------------------------------------
# People: key -> (birthPlace, citizenship(s) "|"-separated, deathPlace)
# "" = not stated (unknown to us, or not a city, or citizenship anachronistic).
# --------------------------------------------------------------------------

US, UK = "United_States", "United_Kingdom"

PEOPLE = {
    # --- United States -----------------------------------------------------
    "Barack_Obama": ("Honolulu", US, ""),
    "Michelle_Obama": ("Chicago", US, ""),
    "Joe_Biden": ("Scranton,_Pennsylvania", US, ""),
    "Jill_Biden": ("Hammonton,_New_Jersey", US, ""),
    "Bill_Clinton": ("Hope,_Arkansas", US, ""),
    "Hillary_Clinton": ("Chicago", US, ""),
    "George_W._Bush": ("New_Haven,_Connecticut", US, ""),
    "Laura_Bush": ("Midland,_Texas", US, ""),
    "Franklin_D._Roosevelt": ("Hyde_Park,_New_York", US, ""),
    "Eleanor_Roosevelt": ("New_York_City", US, ""),
    "Abraham_Lincoln": ("", US, "Washington,_D.C."),
    "John_F._Kennedy": ("Brookline,_Massachusetts", US, "Dallas"),
    "Martin_Luther_King_Jr.": ("Atlanta", US, "Memphis,_Tennessee"),
    "Tom_Hanks": ("Concord,_California", US, ""),
    "Rita_Wilson": ("Los_Angeles", US, ""),
    "Jay-Z": ("New_York_City", US, ""),
    "Beyoncé": ("Houston", US, ""),
    "Oprah_Winfrey": ("Kosciusko,_Mississippi", US, ""),
    "Michael_Jordan": ("New_York_City", US, ""),
    "LeBron_James": ("Akron,_Ohio", US, ""),
    "Savannah_James": ("", US, ""),
    "Serena_Williams": ("Saginaw,_Michigan", US, ""),
    "Alexis_Ohanian": ("New_York_City", US, ""),
    "Andre_Agassi": ("Las_Vegas", US, ""),
    "Meghan,_Duchess_of_Sussex": ("Los_Angeles", US, ""),
    "Mark_Zuckerberg": ("White_Plains,_New_York", US, ""),
    "Priscilla_Chan": ("Braintree,_Massachusetts", US, ""),
    "Tim_Cook": ("Mobile,_Alabama", US, ""),
    "Bill_Gates": ("Seattle", US, ""),
    "Paul_Allen": ("Seattle", US, "Seattle"),
    "Steve_Jobs": ("San_Francisco", US, "Palo_Alto,_California"),
    "Steve_Wozniak": ("San_Jose,_California", US, ""),
    "Ronald_Wayne": ("", US, ""),
    "Larry_Page": ("East_Lansing,_Michigan", US, ""),
    "Sergey_Brin": ("Moscow", US, ""),
    "Jeff_Bezos": ("Albuquerque,_New_Mexico", US, ""),
    "Andy_Jassy": ("", US, ""),
    "Warren_Buffett": ("Omaha,_Nebraska", US, ""),
    "Walt_Disney": ("Chicago", US, "Burbank,_California"),
    "Roy_O._Disney": ("Chicago", US, ""),
    "Henry_Ford": ("", US, "Dearborn,_Michigan"),
    "Sam_Walton": ("Kingfisher,_Oklahoma", US, "Little_Rock,_Arkansas"),
    "Phil_Knight": ("Portland,_Oregon", US, ""),
    "Bill_Bowerman": ("", US, ""),
    "Reed_Hastings": ("Boston", US, ""),
    "Marc_Randolph": ("", US, ""),
    "Gordon_Moore": ("San_Francisco", US, ""),
    "Robert_Noyce": ("Burlington,_Iowa", US, "Austin,_Texas"),
    "Jensen_Huang": ("", US, ""),
    "Sundar_Pichai": ("Madurai", US, ""),
    "Satya_Nadella": ("Hyderabad", US, ""),
    "Elon_Musk": ("Pretoria", "South_Africa|Canada|United_States", ""),
    # --- Canada ---------------------------------------------------------------
    "Justin_Trudeau": ("Ottawa", "Canada", ""),
    "Pierre_Trudeau": ("Montreal", "Canada", ""),
    "Céline_Dion": ("Charlemagne,_Quebec", "Canada", ""),
    "René_Angélil": ("Montreal", "Canada", ""),
    "Drake_(musician)": ("Toronto", "Canada", ""),
    "Ryan_Gosling": ("London,_Ontario", "Canada", ""),
    "Mike_Lazaridis": ("Istanbul", "Canada", ""),
    "Tobias_Lütke": ("Koblenz", "Canada", ""),
    # --- Mexico, Cuba ---------------------------------------------------------
    "Frida_Kahlo": ("Mexico_City", "Mexico", "Mexico_City"),
    "Diego_Rivera": ("Guanajuato_City", "Mexico", "Mexico_City"),
    "Carlos_Slim": ("Mexico_City", "Mexico", ""),
    "Guillermo_del_Toro": ("Guadalajara", "Mexico", ""),
    "Miguel_Díaz-Canel": ("Placetas", "Cuba", ""),
    "Fidel_Castro": ("Birán", "Cuba", "Havana"),
    # --- South America ----------------------------------------------------------
    "Luiz_Inácio_Lula_da_Silva": ("", "Brazil", ""),
    "Pelé": ("Três_Corações", "Brazil", "São_Paulo"),
    "Gisele_Bündchen": ("Horizontina", "Brazil", ""),
    "Neymar": ("Mogi_das_Cruzes", "Brazil", ""),
    "Paulo_Coelho": ("Rio_de_Janeiro", "Brazil", ""),
    "Ayrton_Senna": ("São_Paulo", "Brazil", "Bologna"),
    "Javier_Milei": ("Buenos_Aires", "Argentina", ""),
    "Pope_Francis": ("Buenos_Aires", "Argentina", ""),
    "Lionel_Messi": ("Rosario", "Argentina", ""),
    "Antonela_Roccuzzo": ("Rosario", "Argentina", ""),
    "Diego_Maradona": ("Lanús", "Argentina", "Tigre,_Buenos_Aires"),
    "Jorge_Luis_Borges": ("Buenos_Aires", "Argentina", "Geneva"),
    "Gabriel_Boric": ("Punta_Arenas", "Chile", ""),
    "Pablo_Neruda": ("Parral,_Chile", "Chile", "Santiago"),
    "Michelle_Bachelet": ("Santiago", "Chile", ""),
    "Gustavo_Petro": ("Ciénaga_de_Oro", "Colombia", ""),
    "Shakira": ("Barranquilla", "Colombia", ""),
    "Gabriel_García_Márquez": ("Aracataca", "Colombia", "Mexico_City"),
    "Mercedes_Barcha": ("", "Colombia", ""),
    "Mario_Vargas_Llosa": ("Arequipa", "Peru|Spain", ""),
    # --- United Kingdom ---------------------------------------------------------
    "Charles_III": ("London", UK, ""),
    "Queen_Camilla": ("London", UK, ""),
    "Elizabeth_II": ("London", UK, ""),
    "Prince_Philip,_Duke_of_Edinburgh": ("", UK, "Windsor,_Berkshire"),
    "William,_Prince_of_Wales": ("London", UK, ""),
    "Catherine,_Princess_of_Wales": ("Reading,_Berkshire", UK, ""),
    "Prince_Harry,_Duke_of_Sussex": ("London", UK, ""),
    "David_Beckham": ("London", UK, ""),
    "Victoria_Beckham": ("Harlow", UK, ""),
    "Tony_Blair": ("Edinburgh", UK, ""),
    "Cherie_Blair": ("Bury,_Greater_Manchester", UK, ""),
    "Winston_Churchill": ("", UK, "London"),
    "Clementine_Churchill": ("London", UK, ""),
    "Keir_Starmer": ("London", UK, ""),
    "J._K._Rowling": ("Yate", UK, ""),
    "Adele": ("London", UK, ""),
    "Ed_Sheeran": ("Halifax,_West_Yorkshire", UK, ""),
    "Charles_Darwin": ("Shrewsbury", UK, ""),
    "Alan_Turing": ("London", UK, "Wilmslow"),
    "Stephen_Hawking": ("Oxford", UK, "Cambridge"),
    "Demis_Hassabis": ("London", UK, ""),
    # --- Ireland ----------------------------------------------------------------
    "Michael_D._Higgins": ("Limerick", "Republic_of_Ireland", ""),
    "Sabina_Higgins": ("", "Republic_of_Ireland", ""),
    # --- France -----------------------------------------------------------------
    "Emmanuel_Macron": ("Amiens", "France", ""),
    "Brigitte_Macron": ("Amiens", "France", ""),
    "Nicolas_Sarkozy": ("Paris", "France", ""),
    "Carla_Bruni": ("Turin", "France|Italy", ""),
    "Pierre_Curie": ("Paris", "France", "Paris"),
    "Marie_Curie": ("Warsaw", "France", ""),
    "Kylian_Mbappé": ("Paris", "France", ""),
    "Zinedine_Zidane": ("Marseille", "France", ""),
    "Bernard_Arnault": ("Roubaix", "France", ""),
    "Victor_Hugo": ("Besançon", "France", "Paris"),
    "Charles_de_Gaulle": ("Lille", "France", ""),
    "Coco_Chanel": ("Saumur", "France", "Paris"),
    "Louis_Renault_(industrialist)": ("Paris", "France", ""),
    "André_Michelin": ("", "France", ""),
    "Édouard_Michelin_(born_1859)": ("", "France", ""),
    "Eugène_Schueller": ("", "France", ""),
    # --- Germany ----------------------------------------------------------------
    "Frank-Walter_Steinmeier": ("Detmold", "Germany", ""),
    "Elke_Büdenbender": ("", "Germany", ""),
    "Angela_Merkel": ("Hamburg", "Germany", ""),
    "Joachim_Sauer": ("", "Germany", ""),
    "Olaf_Scholz": ("Osnabrück", "Germany", ""),
    "Britta_Ernst": ("", "Germany", ""),
    "Michael_Schumacher": ("Hürth", "Germany", ""),
    "Corinna_Schumacher": ("", "Germany", ""),
    "Steffi_Graf": ("Mannheim", "Germany", ""),
    "Sebastian_Vettel": ("Heppenheim", "Germany", ""),
    "Dirk_Nowitzki": ("Würzburg", "Germany", ""),
    "Hasso_Plattner": ("Berlin", "Germany", ""),
    "Adolf_Dassler": ("Herzogenaurach", "Germany", ""),
    "Rudolf_Dassler": ("Herzogenaurach", "Germany", ""),
    "Albert_Einstein": ("Ulm", "Switzerland|United_States", "Princeton,_New_Jersey"),
    "Karl_Marx": ("Trier", "", "London"),
    "Ludwig_van_Beethoven": ("Bonn", "", "Vienna"),
    "Johann_Wolfgang_von_Goethe": ("Frankfurt", "", "Weimar"),
    "Henri_Nestlé": ("Frankfurt", "", ""),
    "Werner_von_Siemens": ("", "", ""),
    "Ferdinand_Porsche": ("", "", ""),
    "Hans_Wilsdorf": ("", "", ""),
    # --- Italy ------------------------------------------------------------------
    "Sergio_Mattarella": ("Palermo", "Italy", ""),
    "Giorgia_Meloni": ("Rome", "Italy", ""),
    "Sophia_Loren": ("Rome", "Italy", ""),
    "Carlo_Ponti": ("", "Italy", ""),
    "Enzo_Ferrari": ("Modena", "Italy", ""),
    "Luciano_Pavarotti": ("Modena", "Italy", "Modena"),
    "Valentino_Rossi": ("Urbino", "Italy", ""),
    "Giorgio_Armani": ("Piacenza", "Italy", ""),
    "Giovanni_Agnelli": ("", "Italy", ""),
    # --- Spain ------------------------------------------------------------------
    "Felipe_VI": ("Madrid", "Spain", ""),
    "Queen_Letizia_of_Spain": ("Oviedo", "Spain", ""),
    "Juan_Carlos_I": ("Rome", "Spain", ""),
    "Queen_Sofía_of_Spain": ("", "Spain", ""),
    "Pedro_Sánchez": ("Madrid", "Spain", ""),
    "Begoña_Gómez": ("", "Spain", ""),
    "Javier_Bardem": ("Las_Palmas", "Spain", ""),
    "Penélope_Cruz": ("Alcobendas", "Spain", ""),
    "Rafael_Nadal": ("Manacor", "Spain", ""),
    "Pablo_Picasso": ("Málaga", "Spain", "Mougins"),
    "Antoni_Gaudí": ("Reus", "Spain", "Barcelona"),
    "Amancio_Ortega": ("", "Spain", ""),
    # --- Portugal ---------------------------------------------------------------
    "Marcelo_Rebelo_de_Sousa": ("Lisbon", "Portugal", ""),
    "Cristiano_Ronaldo": ("Funchal", "Portugal", ""),
    "José_Mourinho": ("Setúbal", "Portugal", ""),
    "António_Guterres": ("Lisbon", "Portugal", ""),
    # --- Netherlands, Belgium, Switzerland, Austria -----------------------------
    "Willem-Alexander_of_the_Netherlands": ("Utrecht", "Netherlands", ""),
    "Queen_Máxima_of_the_Netherlands": ("Buenos_Aires", "Netherlands", ""),
    "Mark_Rutte": ("The_Hague", "Netherlands", ""),
    "Max_Verstappen": ("Hasselt", "Netherlands", ""),
    "Vincent_van_Gogh": ("Zundert", "Netherlands", "Auvers-sur-Oise"),
    "Gerard_Philips": ("", "Netherlands", ""),
    "Gerard_Adriaan_Heineken": ("", "Netherlands", ""),
    "Philippe_of_Belgium": ("Brussels", "Belgium", ""),
    "Queen_Mathilde_of_Belgium": ("Uccle", "Belgium", ""),
    "Roger_Federer": ("Basel", "Switzerland", ""),
    "Mirka_Federer": ("", "Switzerland", ""),
    "Alexander_Van_der_Bellen": ("Vienna", "Austria", ""),
    "Arnold_Schwarzenegger": ("Thal,_Austria", "Austria|United_States", ""),
    "Wolfgang_Amadeus_Mozart": ("Salzburg", "", "Vienna"),
    # --- Nordic countries -------------------------------------------------------
    "Carl_XVI_Gustaf": ("Solna", "Sweden", ""),
    "Queen_Silvia_of_Sweden": ("Heidelberg", "Sweden", ""),
    "Greta_Thunberg": ("Stockholm", "Sweden", ""),
    "Zlatan_Ibrahimović": ("Malmö", "Sweden", ""),
    "Daniel_Ek": ("Stockholm", "Sweden", ""),
    "Martin_Lorentzon": ("", "Sweden", ""),
    "Alfred_Nobel": ("Stockholm", "Sweden", "Sanremo"),
    "Lars_Magnus_Ericsson": ("", "Sweden", ""),
    "Harald_V": ("", "Norway", ""),
    "Queen_Sonja_of_Norway": ("Oslo", "Norway", ""),
    "Magnus_Carlsen": ("Tønsberg", "Norway", ""),
    "Hans_Christian_Andersen": ("Odense", "Denmark", "Copenhagen"),
    "Mads_Mikkelsen": ("Copenhagen", "Denmark", ""),
    "Ole_Kirk_Christiansen": ("", "Denmark", ""),
    "Linus_Torvalds": ("Helsinki", "Finland|United_States", ""),
    "Björk": ("Reykjavík", "Iceland", ""),
    # --- Central and Eastern Europe ---------------------------------------------
    "Andrzej_Duda": ("Kraków", "Poland", ""),
    "Agata_Kornhauser-Duda": ("Kraków", "Poland", ""),
    "Lech_Wałęsa": ("", "Poland", ""),
    "Danuta_Wałęsa": ("", "Poland", ""),
    "Robert_Lewandowski": ("Warsaw", "Poland", ""),
    "Anna_Lewandowska": ("Pruszków", "Poland", ""),
    "Petr_Pavel": ("Planá", "Czech_Republic", ""),
    "Viktor_Orbán": ("Székesfehérvár", "Hungary", ""),
    "Anikó_Lévai": ("", "Hungary", ""),
    "Ferenc_Puskás": ("Budapest", "Hungary", "Budapest"),
    "Aleksandar_Vučić": ("Belgrade", "Serbia", ""),
    "Novak_Djokovic": ("Belgrade", "Serbia", ""),
    "Jelena_Djokovic": ("", "Serbia", ""),
    "Kyriakos_Mitsotakis": ("Athens", "Greece", ""),
    "Volodymyr_Zelenskyy": ("Kryvyi_Rih", "Ukraine", ""),
    "Olena_Zelenska": ("Kryvyi_Rih", "Ukraine", ""),
    "Vladimir_Putin": ("Saint_Petersburg", "Russia", ""),
    "Pyotr_Ilyich_Tchaikovsky": ("Votkinsk", "", "Saint_Petersburg"),
    "Recep_Tayyip_Erdoğan": ("Istanbul", "Turkey", ""),
    "Emine_Erdoğan": ("Istanbul", "Turkey", ""),
    "Orhan_Pamuk": ("Istanbul", "Turkey", ""),
    # --- East Asia --------------------------------------------------------------
    "Xi_Jinping": ("Beijing", "China", ""),
    "Peng_Liyuan": ("", "China", ""),
    "Jack_Ma": ("Hangzhou", "China", ""),
    "Yao_Ming": ("Shanghai", "China", ""),
    "Robin_Li": ("Yangquan", "China", ""),
    "Ren_Zhengfei": ("", "China", ""),
    "Ma_Huateng": ("", "China", ""),
    "Naruhito": ("Tokyo", "Japan", ""),
    "Empress_Masako": ("Tokyo", "Japan", ""),
    "Akihito": ("Tokyo", "Japan", ""),
    "Empress_Michiko": ("Tokyo", "Japan", ""),
    "Shinzo_Abe": ("Tokyo", "Japan", "Kashihara,_Nara"),
    "Akie_Abe": ("Tokyo", "Japan", ""),
    "Fumio_Kishida": ("Tokyo", "Japan", ""),
    "Hayao_Miyazaki": ("Tokyo", "Japan", ""),
    "Haruki_Murakami": ("Kyoto", "Japan", ""),
    "Shohei_Ohtani": ("Ōshū,_Iwate", "Japan", ""),
    "Kiichiro_Toyoda": ("", "Japan", ""),
    "Soichiro_Honda": ("", "Japan", ""),
    "Masaru_Ibuka": ("", "Japan", ""),
    "Akio_Morita": ("", "Japan", ""),
    "Fusajiro_Yamauchi": ("", "Japan", ""),
    "Son_Heung-min": ("Chuncheon", "South_Korea", ""),
    "Bong_Joon-ho": ("Daegu", "South_Korea", ""),
    "Lee_Byung-chul": ("", "South_Korea", ""),
    "Chung_Ju-yung": ("", "South_Korea", ""),
    # --- South and Southeast Asia -----------------------------------------------
    "Droupadi_Murmu": ("", "India", ""),
    "Narendra_Modi": ("Vadnagar", "India", ""),
    "Mahatma_Gandhi": ("Porbandar", "", "New_Delhi"),
    "Sachin_Tendulkar": ("Mumbai", "India", ""),
    "Anjali_Tendulkar": ("", "India", ""),
    "Virat_Kohli": ("Delhi", "India", ""),
    "Anushka_Sharma": ("Ayodhya", "India", ""),
    "Mukesh_Ambani": ("", "India", ""),
    "Nita_Ambani": ("Mumbai", "India", ""),
    "Dhirubhai_Ambani": ("Chorwad", "India", "Mumbai"),
    "Ratan_Tata": ("Mumbai", "India", "Mumbai"),
    "N._R._Narayana_Murthy": ("", "India", ""),
    "Sudha_Murty": ("", "India", ""),
    "Malala_Yousafzai": ("Mingora", "Pakistan", ""),
    "Muhammad_Yunus": ("Chittagong", "Bangladesh", ""),
    "Joko_Widodo": ("Surakarta", "Indonesia", ""),
    "Iriana_Joko_Widodo": ("", "Indonesia", ""),
    "Bongbong_Marcos": ("Manila", "Philippines", ""),
    "Liza_Araneta_Marcos": ("", "Philippines", ""),
    "Manny_Pacquiao": ("", "Philippines", ""),
    "Jinkee_Pacquiao": ("", "Philippines", ""),
    "Vajiralongkorn": ("Bangkok", "Thailand", ""),
    "Queen_Suthida": ("", "Thailand", ""),
    # --- Middle East and Africa -------------------------------------------------
    "Salman_of_Saudi_Arabia": ("Riyadh", "Saudi_Arabia", ""),
    "Abdullah_II_of_Jordan": ("Amman", "Jordan", ""),
    "Queen_Rania_of_Jordan": ("", "Jordan", ""),
    "Abdel_Fattah_el-Sisi": ("Cairo", "Egypt", ""),
    "Entissar_Amer": ("", "Egypt", ""),
    "Naguib_Mahfouz": ("Cairo", "Egypt", "Cairo"),
    "Mohamed_Salah": ("", "Egypt", ""),
    "Mohammed_VI_of_Morocco": ("Rabat", "Morocco", ""),
    "Bola_Tinubu": ("", "Nigeria", ""),
    "Oluremi_Tinubu": ("", "Nigeria", ""),
    "Aliko_Dangote": ("Kano", "Nigeria", ""),
    "Chimamanda_Ngozi_Adichie": ("Enugu", "Nigeria", ""),
    "Wole_Soyinka": ("Abeokuta", "Nigeria", ""),
    "Burna_Boy": ("Port_Harcourt", "Nigeria", ""),
    "William_Ruto": ("", "Kenya", ""),
    "Rachel_Ruto": ("", "Kenya", ""),
    "Lupita_Nyong'o": ("Mexico_City", "Kenya|Mexico", ""),
    "Cyril_Ramaphosa": ("Johannesburg", "South_Africa", ""),
    "Tshepo_Motsepe": ("", "South_Africa", ""),
    "Nelson_Mandela": ("Mvezo", "South_Africa", "Johannesburg"),
    "Desmond_Tutu": ("Klerksdorp", "South_Africa", "Cape_Town"),
    "Leah_Tutu": ("", "South_Africa", ""),
    "Charlize_Theron": ("Benoni", "South_Africa|United_States", ""),
    "Trevor_Noah": ("Johannesburg", "South_Africa", ""),
    "Kofi_Annan": ("Kumasi", "Ghana", "Bern"),
    "Alassane_Ouattara": ("Dimbokro", "Côte_d'Ivoire", ""),
    "Didier_Drogba": ("Abidjan", "Côte_d'Ivoire", ""),
    "Youssou_N'Dour": ("Dakar", "Senegal", ""),
    # --- Oceania ----------------------------------------------------------------
    "Cate_Blanchett": ("Melbourne", "Australia", ""),
    "Andrew_Upton": ("", "Australia", ""),
    "Hugh_Jackman": ("Sydney", "Australia", ""),
    "Nicole_Kidman": ("Honolulu", "Australia|United_States", ""),
    "Margot_Robbie": ("Dalby,_Queensland", "Australia", ""),
    "Chris_Hemsworth": ("Melbourne", "Australia", ""),
    "Kylie_Minogue": ("Melbourne", "Australia", ""),
    "Anthony_Albanese": ("Sydney", "Australia", ""),
    "Rupert_Murdoch": ("Melbourne", "United_States", ""),
    "Lorde": ("Auckland", "New_Zealand", ""),
    "Edmund_Hillary": ("Auckland", "New_Zealand", "Auckland"),
    "Russell_Crowe": ("Wellington", "New_Zealand", ""),
}

# Married couples (both directions are emitted). All are long-standing
# marriages that lasted until 2024 or until the death of one spouse.
COUPLES = [
    ("Barack_Obama", "Michelle_Obama"),
    ("Joe_Biden", "Jill_Biden"),
    ("Bill_Clinton", "Hillary_Clinton"),
    ("George_W._Bush", "Laura_Bush"),
    ("Franklin_D._Roosevelt", "Eleanor_Roosevelt"),
    ("Tom_Hanks", "Rita_Wilson"),
    ("Jay-Z", "Beyoncé"),
    ("Mark_Zuckerberg", "Priscilla_Chan"),
    ("LeBron_James", "Savannah_James"),
    ("Serena_Williams", "Alexis_Ohanian"),
    ("Andre_Agassi", "Steffi_Graf"),
    ("Prince_Harry,_Duke_of_Sussex", "Meghan,_Duchess_of_Sussex"),
    ("Charles_III", "Queen_Camilla"),
    ("William,_Prince_of_Wales", "Catherine,_Princess_of_Wales"),
    ("Elizabeth_II", "Prince_Philip,_Duke_of_Edinburgh"),
    ("David_Beckham", "Victoria_Beckham"),
    ("Tony_Blair", "Cherie_Blair"),
    ("Winston_Churchill", "Clementine_Churchill"),
    ("Michael_D._Higgins", "Sabina_Higgins"),
    ("Emmanuel_Macron", "Brigitte_Macron"),
    ("Nicolas_Sarkozy", "Carla_Bruni"),
    ("Pierre_Curie", "Marie_Curie"),
    ("Frank-Walter_Steinmeier", "Elke_Büdenbender"),
    ("Angela_Merkel", "Joachim_Sauer"),
    ("Olaf_Scholz", "Britta_Ernst"),
    ("Michael_Schumacher", "Corinna_Schumacher"),
    ("Sophia_Loren", "Carlo_Ponti"),
    ("Felipe_VI", "Queen_Letizia_of_Spain"),
    ("Juan_Carlos_I", "Queen_Sofía_of_Spain"),
    ("Pedro_Sánchez", "Begoña_Gómez"),
    ("Javier_Bardem", "Penélope_Cruz"),
    ("Willem-Alexander_of_the_Netherlands", "Queen_Máxima_of_the_Netherlands"),
    ("Philippe_of_Belgium", "Queen_Mathilde_of_Belgium"),
    ("Roger_Federer", "Mirka_Federer"),
    ("Carl_XVI_Gustaf", "Queen_Silvia_of_Sweden"),
    ("Harald_V", "Queen_Sonja_of_Norway"),
    ("Andrzej_Duda", "Agata_Kornhauser-Duda"),
    ("Lech_Wałęsa", "Danuta_Wałęsa"),
    ("Robert_Lewandowski", "Anna_Lewandowska"),
    ("Viktor_Orbán", "Anikó_Lévai"),
    ("Novak_Djokovic", "Jelena_Djokovic"),
    ("Volodymyr_Zelenskyy", "Olena_Zelenska"),
    ("Recep_Tayyip_Erdoğan", "Emine_Erdoğan"),
    ("Xi_Jinping", "Peng_Liyuan"),
    ("Naruhito", "Empress_Masako"),
    ("Akihito", "Empress_Michiko"),
    ("Shinzo_Abe", "Akie_Abe"),
    ("Sachin_Tendulkar", "Anjali_Tendulkar"),
    ("Virat_Kohli", "Anushka_Sharma"),
    ("Mukesh_Ambani", "Nita_Ambani"),
    ("N._R._Narayana_Murthy", "Sudha_Murty"),
    ("Joko_Widodo", "Iriana_Joko_Widodo"),
    ("Bongbong_Marcos", "Liza_Araneta_Marcos"),
    ("Manny_Pacquiao", "Jinkee_Pacquiao"),
    ("Vajiralongkorn", "Queen_Suthida"),
    ("Abdullah_II_of_Jordan", "Queen_Rania_of_Jordan"),
    ("Abdel_Fattah_el-Sisi", "Entissar_Amer"),
    ("Bola_Tinubu", "Oluremi_Tinubu"),
    ("William_Ruto", "Rachel_Ruto"),
    ("Cyril_Ramaphosa", "Tshepo_Motsepe"),
    ("Desmond_Tutu", "Leah_Tutu"),
    ("Lionel_Messi", "Antonela_Roccuzzo"),
    ("Gabriel_García_Márquez", "Mercedes_Barcha"),
    ("Frida_Kahlo", "Diego_Rivera"),
    ("Céline_Dion", "René_Angélil"),
    ("Cate_Blanchett", "Andrew_Upton"),
]

# --------------------------------------------------------------------------
# Universities: key -> country; alma maters: person -> universities
# --------------------------------------------------------------------------

UNIVERSITIES = {
    "Harvard_University": US, "Columbia_University": US, "Princeton_University": US,
    "Yale_University": US, "Stanford_University": US, "Georgetown_University": US,
    "University_of_Pennsylvania": US, "University_of_Michigan": US,
    "Massachusetts_Institute_of_Technology": US, "University_of_Delaware": US,
    "Syracuse_University": US, "Auburn_University": US, "Duke_University": US,
    "Wellesley_College": US, "University_of_Chicago": US, "Oregon_State_University": US,
    "University_of_Oregon": US, "University_of_California,_Berkeley": US,
    "California_Institute_of_Technology": US, "Bowdoin_College": US,
    "Grinnell_College": US, "University_of_Maryland,_College_Park": US,
    "University_of_Wisconsin–Milwaukee": US, "University_at_Buffalo": US,
    "University_of_Oxford": UK, "University_of_Cambridge": UK,
    "University_of_Edinburgh": UK, "University_College_London": UK,
    "University_of_Leeds": UK,
    "Sciences_Po": "France", "École_nationale_d'administration": "France",
    "University_of_Paris": "France",
    "Leipzig_University": "Germany",
    "ETH_Zurich": "Switzerland", "University_of_Zurich": "Switzerland",
    "Autonomous_University_of_Madrid": "Spain",
    "University_of_Tokyo": "Japan", "Waseda_University": "Japan",
    "Gakushuin_University": "Japan", "Seikei_University": "Japan",
    "Tsinghua_University": "China", "Peking_University": "China",
    "Shenzhen_University": "China",
    "Indian_Institute_of_Technology_Kharagpur": "India",
}

ALMA_MATER = {
    "Barack_Obama": "Columbia_University Harvard_University",
    "Michelle_Obama": "Princeton_University Harvard_University",
    "Bill_Clinton": "Georgetown_University University_of_Oxford Yale_University",
    "Hillary_Clinton": "Wellesley_College Yale_University",
    "George_W._Bush": "Yale_University Harvard_University",
    "Joe_Biden": "University_of_Delaware Syracuse_University",
    "Mark_Zuckerberg": "Harvard_University",
    "Priscilla_Chan": "Harvard_University",
    "Bill_Gates": "Harvard_University",
    "Larry_Page": "University_of_Michigan Stanford_University",
    "Sergey_Brin": "University_of_Maryland,_College_Park Stanford_University",
    "Jeff_Bezos": "Princeton_University",
    "Tim_Cook": "Auburn_University Duke_University",
    "Sundar_Pichai": "Indian_Institute_of_Technology_Kharagpur Stanford_University "
                     "University_of_Pennsylvania",
    "Satya_Nadella": "University_of_Wisconsin–Milwaukee University_of_Chicago",
    "Jensen_Huang": "Oregon_State_University Stanford_University",
    "Elon_Musk": "University_of_Pennsylvania",
    "Reed_Hastings": "Bowdoin_College Stanford_University",
    "Phil_Knight": "University_of_Oregon Stanford_University",
    "Gordon_Moore": "University_of_California,_Berkeley California_Institute_of_Technology",
    "Robert_Noyce": "Grinnell_College Massachusetts_Institute_of_Technology",
    "Kofi_Annan": "Massachusetts_Institute_of_Technology",
    "Emmanuel_Macron": "Sciences_Po École_nationale_d'administration",
    "Angela_Merkel": "Leipzig_University",
    "Tony_Blair": "University_of_Oxford",
    "Keir_Starmer": "University_of_Leeds University_of_Oxford",
    "Stephen_Hawking": "University_of_Oxford University_of_Cambridge",
    "Alan_Turing": "University_of_Cambridge Princeton_University",
    "Charles_Darwin": "University_of_Edinburgh University_of_Cambridge",
    "Demis_Hassabis": "University_of_Cambridge University_College_London",
    "Marie_Curie": "University_of_Paris",
    "Albert_Einstein": "ETH_Zurich University_of_Zurich",
    "Felipe_VI": "Autonomous_University_of_Madrid Georgetown_University",
    "Naruhito": "Gakushuin_University University_of_Oxford",
    "Empress_Masako": "Harvard_University University_of_Tokyo University_of_Oxford",
    "Shinzo_Abe": "Seikei_University",
    "Fumio_Kishida": "Waseda_University",
    "Haruki_Murakami": "Waseda_University",
    "Xi_Jinping": "Tsinghua_University",
    "Robin_Li": "Peking_University University_at_Buffalo",
    "Ma_Huateng": "Shenzhen_University",
}

# --------------------------------------------------------------------------
# Companies: key -> (headquarter city, founders "|"-sep, CEO in 2024 or "")
# dbo:locationCountry is derived as the dbo:country of the headquarter city.
# --------------------------------------------------------------------------

COMPANIES = {
    "Apple_Inc.": ("Cupertino,_California", "Steve_Jobs|Steve_Wozniak|Ronald_Wayne", "Tim_Cook"),
    "Microsoft": ("Redmond,_Washington", "Bill_Gates|Paul_Allen", "Satya_Nadella"),
    "Google": ("Mountain_View,_California", "Larry_Page|Sergey_Brin", "Sundar_Pichai"),
    "Amazon_(company)": ("Seattle", "Jeff_Bezos", "Andy_Jassy"),
    "Meta_Platforms": ("Menlo_Park,_California", "Mark_Zuckerberg", "Mark_Zuckerberg"),
    "Tesla,_Inc.": ("Austin,_Texas", "", "Elon_Musk"),
    "Nvidia": ("Santa_Clara,_California", "Jensen_Huang", "Jensen_Huang"),
    "Intel": ("Santa_Clara,_California", "Gordon_Moore|Robert_Noyce", ""),
    "The_Coca-Cola_Company": ("Atlanta", "", ""),
    "Walmart": ("Bentonville,_Arkansas", "Sam_Walton", ""),
    "Nike,_Inc.": ("Beaverton,_Oregon", "Phil_Knight|Bill_Bowerman", ""),
    "Ford_Motor_Company": ("Dearborn,_Michigan", "Henry_Ford", ""),
    "IBM": ("Armonk,_New_York", "", ""),
    "Netflix": ("Los_Gatos,_California", "Reed_Hastings|Marc_Randolph", ""),
    "The_Walt_Disney_Company": ("Burbank,_California", "Walt_Disney|Roy_O._Disney", ""),
    "Berkshire_Hathaway": ("Omaha,_Nebraska", "", "Warren_Buffett"),
    "Shopify": ("Ottawa", "Tobias_Lütke", "Tobias_Lütke"),
    "BlackBerry_Limited": ("Waterloo,_Ontario", "Mike_Lazaridis", ""),
    "América_Movil": ("Mexico_City", "Carlos_Slim", ""),
    "Petrobras": ("Rio_de_Janeiro", "", ""),
    "Itaú_Unibanco": ("São_Paulo", "", ""),
    "Sony": ("Tokyo", "Masaru_Ibuka|Akio_Morita", ""),
    "Toyota": ("Toyota,_Aichi", "Kiichiro_Toyoda", ""),
    "Nintendo": ("Kyoto", "Fusajiro_Yamauchi", ""),
    "Honda": ("Tokyo", "Soichiro_Honda", ""),
    "Samsung_Electronics": ("Suwon", "Lee_Byung-chul", ""),
    "Hyundai_Motor_Company": ("Seoul", "Chung_Ju-yung", ""),
    "Alibaba_Group": ("Hangzhou", "Jack_Ma", ""),
    "Tencent": ("Shenzhen", "Ma_Huateng", "Ma_Huateng"),
    "Huawei": ("Shenzhen", "Ren_Zhengfei", ""),
    "Baidu": ("Beijing", "Robin_Li", "Robin_Li"),
    "Tata_Consultancy_Services": ("Mumbai", "", ""),
    "Reliance_Industries": ("Mumbai", "Dhirubhai_Ambani", ""),
    "Infosys": ("Bangalore", "N._R._Narayana_Murthy", ""),
    "Volkswagen_Group": ("Wolfsburg", "", ""),
    "BMW": ("Munich", "", ""),
    "Siemens": ("Munich", "Werner_von_Siemens", ""),
    "SAP": ("Walldorf", "Hasso_Plattner", ""),
    "Adidas": ("Herzogenaurach", "Adolf_Dassler", ""),
    "Puma_(brand)": ("Herzogenaurach", "Rudolf_Dassler", ""),
    "Mercedes-Benz_Group": ("Stuttgart", "", ""),
    "Porsche": ("Stuttgart", "Ferdinand_Porsche", ""),
    "LVMH": ("Paris", "", "Bernard_Arnault"),
    "L'Oréal": ("Clichy,_Hauts-de-Seine", "Eugène_Schueller", ""),
    "Michelin": ("Clermont-Ferrand", "André_Michelin|Édouard_Michelin_(born_1859)", ""),
    "TotalEnergies": ("Courbevoie", "", ""),
    "Renault": ("Boulogne-Billancourt", "Louis_Renault_(industrialist)", ""),
    "Nestlé": ("Vevey", "Henri_Nestlé", ""),
    "Roche_Holding": ("Basel", "", ""),
    "Novartis": ("Basel", "", ""),
    "Rolex": ("Geneva", "Hans_Wilsdorf", ""),
    "Philips": ("Amsterdam", "Gerard_Philips", ""),
    "Heineken_N.V.": ("Amsterdam", "Gerard_Adriaan_Heineken", ""),
    "ASML_Holding": ("Veldhoven", "", ""),
    "Shell_plc": ("London", "", ""),
    "HSBC": ("London", "", ""),
    "BP": ("London", "", ""),
    "Unilever": ("London", "", ""),
    "AstraZeneca": ("Cambridge", "", ""),
    "Arm_Holdings": ("Cambridge", "", ""),
    "Nokia": ("Espoo", "", ""),
    "Ericsson": ("Stockholm", "Lars_Magnus_Ericsson", ""),
    "Spotify": ("Stockholm", "Daniel_Ek|Martin_Lorentzon", "Daniel_Ek"),
    "Volvo_Cars": ("Gothenburg", "", ""),
    "The_Lego_Group": ("Billund", "Ole_Kirk_Christiansen", ""),
    "Novo_Nordisk": ("Bagsværd", "", ""),
    "Ferrari": ("Maranello", "Enzo_Ferrari", ""),
    "Fiat": ("Turin", "Giovanni_Agnelli", ""),
    "Eni": ("Rome", "", ""),
    "Inditex": ("Arteixo", "Amancio_Ortega", ""),
    "Telefónica": ("Madrid", "", ""),
    "Turkish_Airlines": ("Istanbul", "", ""),
    "Saudi_Aramco": ("Dhahran", "", ""),
    "Dangote_Group": ("Lagos", "Aliko_Dangote", ""),
    "Safaricom": ("Nairobi", "", ""),
    "Naspers": ("Cape_Town", "", ""),
    "BHP": ("Melbourne", "", ""),
    "Qantas": ("Sydney", "", ""),
}

# Labels that differ from "key with underscores replaced by spaces".
LABELS = {
    "Republic_of_Ireland": "Ireland",
    "Amazon_(company)": "Amazon",
    "Puma_(brand)": "Puma",
    "Drake_(musician)": "Drake",
    "Louis_Renault_(industrialist)": "Louis Renault",
    "Édouard_Michelin_(born_1859)": "Édouard Michelin",
    "Roche_Holding": "Roche",
    "Heineken_N.V.": "Heineken",
    "ASML_Holding": "ASML",
    "América_Movil": "América Móvil",
    **LANGUAGES,
}

# --------------------------------------------------------------------------
# Wikidata relations and the DBpedia predicates used for them
# --------------------------------------------------------------------------

# P-id -> (Wikidata label, DBpedia ontology predicate local name(s))
PID = {
    "P26": ("spouse", ["spouse"]),
    "P27": ("country of citizenship", ["citizenship"]),
    "P19": ("place of birth", ["birthPlace"]),
    "P20": ("place of death", ["deathPlace"]),
    "P17": ("country", ["country", "locationCountry"]),
    "P36": ("capital", ["capital"]),
    "P35": ("head of state", ["leader"]),
    "P159": ("headquarters location", ["headquarter"]),
    "P37": ("official language", ["officialLanguage"]),
    "P30": ("continent", ["continent"]),
    "P112": ("founded by", ["foundedBy"]),
    "P38": ("currency", ["currency"]),
    "P169": ("chief executive officer", ["ceo"]),
    "P69": ("educated at", ["almaMater"]),
}

# Wikidata Q-ids for edit targets; only ids we are certain of, else null.
QIDS = {
    "United_States": "Q30", "Canada": "Q16", "France": "Q142", "Germany": "Q183",
    "Italy": "Q38", "Spain": "Q29", "United_Kingdom": "Q145", "Japan": "Q17",
    "China": "Q148", "India": "Q668", "Brazil": "Q155", "Russia": "Q159",
    "Mexico": "Q96", "Argentina": "Q414", "Australia": "Q408", "Netherlands": "Q55",
    "Belgium": "Q31", "Switzerland": "Q39", "Austria": "Q40", "Sweden": "Q34",
    "Norway": "Q20", "Denmark": "Q35", "Finland": "Q33", "Poland": "Q36",
    "Republic_of_Ireland": "Q27", "Portugal": "Q45", "Greece": "Q41", "Turkey": "Q43",
    "Ukraine": "Q212", "South_Korea": "Q884", "Egypt": "Q79", "South_Africa": "Q258",
    "New_Zealand": "Q664", "Nigeria": "Q1033", "Hungary": "Q28", "Serbia": "Q403",
    "Chile": "Q298", "Colombia": "Q739",
    "Paris": "Q90", "London": "Q84", "Berlin": "Q64", "Rome": "Q220", "Madrid": "Q2807",
    "Tokyo": "Q1490", "Beijing": "Q956", "Moscow": "Q649", "Washington,_D.C.": "Q61",
    "New_York_City": "Q60", "Ottawa": "Q1930", "Los_Angeles": "Q65", "Chicago": "Q1297",
    "Amsterdam": "Q727", "Vienna": "Q1741", "Warsaw": "Q270", "Prague": "Q1085",
    "Lisbon": "Q597", "Stockholm": "Q1754", "Oslo": "Q585", "Copenhagen": "Q1748",
    "Lyon": "Q456", "Marseille": "Q23482", "Munich": "Q1726", "Kyoto": "Q34600",
    "Sydney": "Q3130", "Melbourne": "Q3141", "Toronto": "Q172", "Istanbul": "Q406",
    "Ankara": "Q3640", "Lagos": "Q8673", "Canberra": "Q3114", "Houston": "Q16555",
    "Hamburg": "Q1055", "Brussels": "Q239", "Seoul": "Q8684", "Shanghai": "Q8686",
    "Buenos_Aires": "Q1486", "Rio_de_Janeiro": "Q8678", "Turin": "Q495",
    "Dublin": "Q1761", "Honolulu": "Q18094",
    "Barack_Obama": "Q76", "Michelle_Obama": "Q13133", "Joe_Biden": "Q6279",
    "Angela_Merkel": "Q567", "Emmanuel_Macron": "Q3052772", "Tom_Hanks": "Q2263",
    "Beyoncé": "Q36153", "Lionel_Messi": "Q615", "Cristiano_Ronaldo": "Q11571",
    "Rafael_Nadal": "Q10132", "Roger_Federer": "Q1426", "Serena_Williams": "Q11459",
    "Shakira": "Q34424", "Adele": "Q23215", "Jay-Z": "Q62766", "David_Beckham": "Q10520",
    "Charles_III": "Q43274", "Elizabeth_II": "Q9682", "Felipe_VI": "Q191045",
    "Willem-Alexander_of_the_Netherlands": "Q154946",
    "English_language": "Q1860", "French_language": "Q150", "German_language": "Q188",
    "Spanish_language": "Q1321", "Italian_language": "Q652", "Japanese_language": "Q5287",
    "Russian_language": "Q7737", "Portuguese_language": "Q5146", "Arabic": "Q13955",
    "Africa": "Q15", "Asia": "Q48", "Europe": "Q46", "North_America": "Q49",
    "South_America": "Q18",
    "Euro": "Q4916", "United_States_dollar": "Q4917", "Japanese_yen": "Q8146",
    "Pound_sterling": "Q25224",
}

# Alternative names accepted as answers.
ALIASES = {
    "United_States": ["United States of America", "USA", "U.S.", "US", "America"],
    "United_Kingdom": ["UK", "Britain", "Great Britain",
                       "United Kingdom of Great Britain and Northern Ireland"],
    "Republic_of_Ireland": ["Republic of Ireland", "Éire"],
    "Czech_Republic": ["Czechia"],
    "Turkey": ["Türkiye"],
    "South_Korea": ["Republic of Korea", "Korea"],
    "China": ["People's Republic of China", "PRC"],
    "Côte_d'Ivoire": ["Ivory Coast"],
    "Washington,_D.C.": ["Washington", "Washington DC", "D.C."],
    "Kyiv": ["Kiev"],
    "Mexico_City": ["Ciudad de México", "CDMX"],
    "Rio_de_Janeiro": ["Rio"],
    "Standard_Chinese": ["Mandarin", "Mandarin Chinese"],
    "United_States_dollar": ["US dollar", "U.S. dollar", "USD", "dollar"],
    "Pound_sterling": ["British pound", "pound", "GBP"],
    "Euro": ["EUR"],
    "Australian_dollar": ["AUD"],
    "Serbian_dinar": ["dinar", "RSD"],
    "Hungarian_forint": ["forint", "HUF"],
    "Charles_III": ["King Charles III", "Charles III of the United Kingdom"],
    "Michael_D._Higgins": ["Michael Higgins"],
    "Queen_Letizia_of_Spain": ["Queen Letizia", "Letizia Ortiz"],
    "Queen_Máxima_of_the_Netherlands": ["Queen Máxima", "Máxima Zorreguieta"],
    "Queen_Silvia_of_Sweden": ["Queen Silvia", "Silvia Sommerlath"],
    "Queen_Sonja_of_Norway": ["Queen Sonja", "Sonja Haraldsen"],
    "North_America": ["the Americas"],
    "South_America": ["the Americas"],
}

# --------------------------------------------------------------------------
# Edit cases
#   (edited relation, subject, new object, other relation, head entity or None)
#   head None: chain subject -edit-> object -other-> answer   (edit on hop 1)
#   head X   : chain X -other-> subject -edit-> answer         (edit on hop 2)
# --------------------------------------------------------------------------

EDITS = [
    # country of citizenship (P27)
    ("P27", "Barack_Obama", "Canada", "P36", None),
    ("P27", "Michelle_Obama", "United_Kingdom", "P38", None),
    ("P27", "Emmanuel_Macron", "Belgium", "P36", None),
    ("P27", "Angela_Merkel", "Austria", "P36", None),
    ("P27", "Tom_Hanks", "Australia", "P38", None),
    ("P27", "Olaf_Scholz", "Denmark", "P37", None),
    ("P27", "Volodymyr_Zelenskyy", "Poland", "P37", None),
    ("P27", "Novak_Djokovic", "Hungary", "P38", None),
    ("P27", "Lionel_Messi", "Italy", "P36", None),
    ("P27", "Shinzo_Abe", "South_Korea", "P37", None),
    ("P27", "Sachin_Tendulkar", "Australia", "P30", None),
    ("P27", "Cate_Blanchett", "Republic_of_Ireland", "P35", None),
    ("P27", "Penélope_Cruz", "Portugal", "P36", None),
    # place of birth (P19)
    ("P19", "Joe_Biden", "Dublin", "P17", None),
    ("P19", "Beyoncé", "Lagos", "P17", None),
    ("P19", "Angela_Merkel", "Copenhagen", "P17", None),
    ("P19", "Kylian_Mbappé", "Brussels", "P17", None),
    ("P19", "Cristiano_Ronaldo", "Rio_de_Janeiro", "P17", None),
    ("P19", "Jack_Ma", "Seoul", "P17", None),
    ("P19", "Rafael_Nadal", "Buenos_Aires", "P17", None),
    ("P19", "Hayao_Miyazaki", "Shanghai", "P17", None),
    ("P19", "Greta_Thunberg", "Oslo", "P17", None),
    # spouse (P26)
    ("P26", "David_Beckham", "Shakira", "P27", None),
    ("P26", "Tom_Hanks", "Cate_Blanchett", "P19", None),
    ("P26", "Emmanuel_Macron", "Carla_Bruni", "P19", None),
    ("P26", "Jay-Z", "Adele", "P27", None),
    ("P26", "Lionel_Messi", "Gisele_Bündchen", "P19", None),
    ("P26", "Roger_Federer", "Serena_Williams", "P27", None),
    # capital (P36): four move the capital abroad (so the city's country changes with
    # it, a rule-entailed consequence), three move it within the country
    ("P36", "France", "Brussels", "P27", "Coco_Chanel"),
    ("P36", "Germany", "Vienna", "P27", "Sebastian_Vettel"),
    ("P36", "Japan", "Seoul", "P27", "Haruki_Murakami"),
    ("P36", "Australia", "Sydney", "P27", "Margot_Robbie"),
    ("P36", "Canada", "Washington,_D.C.", "P27", "Ryan_Gosling"),
    ("P36", "Turkey", "Istanbul", "P27", "Orhan_Pamuk"),
    ("P36", "Nigeria", "Lagos", "P27", "Chimamanda_Ngozi_Adichie"),
    # country of a city (P17)
    ("P17", "Marseille", "Italy", "P19", "Zinedine_Zidane"),
    ("P17", "Rosario", "Chile", "P19", "Antonela_Roccuzzo"),
    ("P17", "Toronto", "United_States", "P36", None),
    ("P17", "Salzburg", "Germany", "P19", "Wolfgang_Amadeus_Mozart"),
    # headquarters location (P159)
    ("P159", "Apple_Inc.", "London", "P17", None),
    ("P159", "Toyota", "Seoul", "P17", None),
    ("P159", "Nestlé", "Lyon", "P17", None),
    ("P159", "Samsung_Electronics", "Tokyo", "P17", None),
    ("P159", "Spotify", "Berlin", "P17", None),
    # official language (P37)
    ("P37", "Brazil", "Spanish_language", "P27", "Neymar"),
    ("P37", "Japan", "English_language", "P27", "Shohei_Ohtani"),
    ("P37", "Egypt", "French_language", "P27", "Naguib_Mahfouz"),
    # continent (P30)
    ("P30", "Australia", "Asia", "P27", "Kylie_Minogue"),
    ("P30", "Mexico", "South_America", "P27", "Frida_Kahlo"),
    # head of state (P35)
    ("P35", "Spain", "Willem-Alexander_of_the_Netherlands", "P26", None),
    ("P35", "Sweden", "Harald_V", "P26", None),
]

# Single-relation prompt (cloze with "{}" for the subject) and question.
REL_PROMPT = {
    "P27": "{} is a citizen of",
    "P19": "{} was born in the city of",
    "P26": "{} is married to",
    "P36": "The capital of {} is",
    "P17": "{} is located in the country of",
    "P159": "The headquarters of {} are located in the city of",
    "P37": "The official language of {} is",
    "P30": "{} is located on the continent of",
    "P35": "The head of state of {} is",
    "P38": "The currency used in {} is",
}
REL_QUESTION = {
    "P27": "What is the country of citizenship of {}?",
    "P19": "In which city was {} born?",
    "P26": "Who is {} married to?",
    "P36": "What is the capital of {}?",
    "P17": "In which country is {} located?",
    "P159": "In which city are the headquarters of {}?",
    "P37": "What is the official language of {}?",
    "P30": "On which continent is {} located?",
    "P35": "Who is the head of state of {}?",
    "P38": "What is the currency of {}?",
}
# Two-hop questions, keyed by (first relation, second relation).
MULTI_HOP = {
    ("P27", "P36"): [
        "What is the capital of the country of citizenship of {}?",
        "Which city is the capital of the country that {} is a citizen of?",
        "{} holds citizenship of a country; what is that country's capital city?",
    ],
    ("P27", "P37"): [
        "What is the official language of the country of which {} is a citizen?",
        "Which language is official in the country that {} holds citizenship of?",
        "What language has official status in {}'s country of citizenship?",
    ],
    ("P27", "P38"): [
        "What currency is used in the country of citizenship of {}?",
        "Which currency does the country that {} is a citizen of use?",
        "What is the currency of {}'s country of citizenship?",
    ],
    ("P27", "P30"): [
        "On which continent is the country of citizenship of {} located?",
        "Which continent is the country that {} is a citizen of part of?",
        "{} is a citizen of a country; on what continent does that country lie?",
    ],
    ("P27", "P35"): [
        "Who is the head of state of the country of citizenship of {}?",
        "Who serves as head of state of the country that {} is a citizen of?",
        "Which person is the head of state of {}'s country of citizenship?",
    ],
    ("P19", "P17"): [
        "In which country is the city where {} was born?",
        "Which country is {}'s birthplace located in?",
        "{} was born in a city; which country is that city in?",
    ],
    ("P26", "P27"): [
        "What is the country of citizenship of the person {} is married to?",
        "Which country is {}'s spouse a citizen of?",
        "Of which country is the spouse of {} a citizen?",
    ],
    ("P26", "P19"): [
        "In which city was the spouse of {} born?",
        "Where was the person married to {} born?",
        "What is the birthplace city of {}'s spouse?",
    ],
    ("P159", "P17"): [
        "In which country is the city where {} has its headquarters?",
        "Which country is home to the headquarters city of {}?",
        "The headquarters of {} are in a city; which country is that city in?",
    ],
    ("P17", "P36"): [
        "What is the capital of the country in which {} is located?",
        "Which city is the capital of the country containing {}?",
        "{} lies in a country; what is that country's capital?",
    ],
    ("P35", "P26"): [
        "Who is the spouse of the head of state of {}?",
        "Who is married to the person who is head of state of {}?",
        "The head of state of {} is married to whom?",
    ],
}

# ==========================================================================
# Building
# ==========================================================================

_IRI_BAD = re.compile(r'[\x00-\x20<>"{}|^`\\]')


def iri(key: str, base: str = RES) -> str:
    """Full IRI for a resource key, percent-encoding characters illegal in IRIs."""
    enc = _IRI_BAD.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), key)
    return base + enc


def literal(text: str, lang: str = "en") -> str:
    """N-Triples language-tagged literal with the required escapes."""
    esc = (text.replace("\\", "\\\\").replace('"', '\\"')
           .replace("\n", "\\n").replace("\r", "\\r"))
    return f'"{esc}"@{lang}'


def label_of(key: str) -> str:
    return LABELS.get(key, key.replace("_", " "))


def split(values: str, sep: str = "|") -> list[str]:
    return [v for v in (values.split(sep) if sep else values.split()) if v]


class KG:
    def __init__(self) -> None:
        self.types: dict[str, str] = {}
        self.facts: set[tuple[str, str, str]] = set()  # (subject key, dbo pred, object key)

    def entity(self, key: str, cls: str) -> None:
        old = self.types.setdefault(key, cls)
        assert old == cls, f"{key} typed both {old} and {cls}"

    def add(self, s: str, p: str, o: str) -> None:
        self.facts.add((s, p, o))

    def objects(self, s: str, preds: list[str]) -> list[str]:
        return sorted(o for (s2, p, o) in self.facts if s2 == s and p in preds)


def build_kg() -> KG:
    kg = KG()
    for c in CONTINENTS:
        kg.entity(c, "Continent")
    for lang in LANGUAGES:
        kg.entity(lang, "Language")

    city_country: dict[str, str] = {}
    for country, names in CITIES.items():
        assert country in COUNTRIES, country
        for city in split(names, sep=""):
            assert city not in city_country, f"duplicate city {city}"
            city_country[city] = country
            kg.entity(city, "City")
            kg.add(city, "country", country)

    def need(kind: str, key: str) -> str:
        assert key in kg.types and kg.types[key] == kind, f"unknown {kind}: {key}"
        return key

    for person in PEOPLE:
        kg.entity(person, "Person")

    for country, (caps, langs, conts, cur, big, hos) in COUNTRIES.items():
        kg.entity(country, "Country")
        for cap in split(caps):
            assert city_country.get(cap) == country, f"capital {cap} not in {country}"
            kg.add(country, "capital", cap)
        for lang in split(langs):
            kg.add(country, "officialLanguage", need("Language", lang))
        for cont in split(conts):
            kg.add(country, "continent", need("Continent", cont))
        kg.entity(cur, "Currency")
        kg.add(country, "currency", cur)
        if big:
            assert city_country.get(big) == country, f"largest city {big} not in {country}"
            kg.add(country, "largestCity", big)
        if hos:
            kg.add(country, "leader", need("Person", hos))

    for person, (birth, cits, death) in PEOPLE.items():
        if birth:
            kg.add(person, "birthPlace", need("City", birth))
        for cit in split(cits):
            kg.add(person, "citizenship", need("Country", cit))
        if death:
            kg.add(person, "deathPlace", need("City", death))

    married: set[str] = set()
    for a, b in COUPLES:
        for x in (a, b):
            need("Person", x)
            assert x not in married, f"{x} listed in two couples"
            married.add(x)
        kg.add(a, "spouse", b)
        kg.add(b, "spouse", a)

    for uni, country in UNIVERSITIES.items():
        kg.entity(uni, "University")
        kg.add(uni, "country", need("Country", country))
    for person, unis in ALMA_MATER.items():
        for uni in split(unis, sep=""):
            kg.add(need("Person", person), "almaMater", need("University", uni))

    for comp, (hq, founders, ceo) in COMPANIES.items():
        kg.entity(comp, "Company")
        kg.add(comp, "headquarter", need("City", hq))
        kg.add(comp, "locationCountry", city_country[hq])
        for f in split(founders):
            kg.add(comp, "foundedBy", need("Person", f))
        if ceo:
            kg.add(comp, "ceo", need("Person", ceo))

    labels = [label_of(k) for k in kg.types]
    dupes = {x for x in labels if labels.count(x) > 1}
    assert not dupes, f"duplicate labels: {dupes}"
    return kg


def write_nt(kg: KG, path: Path) -> int:
    lines = set()
    for key, cls in kg.types.items():
        lines.add(f"<{iri(key)}> <{RDF_TYPE}> <{ONT}{cls}> .")
        lines.add(f"<{iri(key)}> <{RDFS_LABEL}> {literal(label_of(key))} .")
    for s, p, o in kg.facts:
        lines.add(f"<{iri(s)}> <{ONT}{p}> <{iri(o)}> .")
    out = sorted(lines)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return len(out)


# --------------------------------------------------------------------------
# Edit cases
# --------------------------------------------------------------------------


def one(kg: KG, s: str, pid: str, override: dict | None = None) -> str:
    """The single object of (s, pid), optionally under an edit override."""
    if override and (s, pid) in override:
        return override[(s, pid)]
    objs = kg.objects(s, PID[pid][1])
    assert len(objs) == 1, f"({s}, {pid}) has {len(objs)} objects: {objs}"
    return objs[0]


def hop(pid: str, s: str, o: str) -> dict:
    subj = label_of(s)
    return {
        "question": REL_QUESTION[pid].format(subj),
        "cloze": REL_PROMPT[pid].format(subj),
        "answer": label_of(o),
    }


def build_cases(kg: KG) -> list[dict]:
    cases = []
    for n, (rel, subj, new, other, head) in enumerate(EDITS, start=1):
        old = one(kg, subj, rel)
        assert new != old and new in kg.types and kg.types[new] == kg.types[old], (subj, new)
        assert new not in kg.objects(subj, PID[rel][1]), f"{subj} {rel} {new} is already true"
        edit = {(subj, rel): new}

        if head is None:
            rels, start = (rel, other), subj
        else:
            rels, start = (other, rel), head
            assert one(kg, head, other) == subj, (head, other, subj)

        def chain(override: dict | None) -> list[tuple[str, str, str]]:
            triples, cur = [], start
            for pid in rels:
                nxt = one(kg, cur, pid, override)
                triples.append((cur, pid, nxt))
                cur = nxt
            return triples

        orig, edited = chain(None), chain(edit)
        ans, new_ans = orig[-1][2], edited[-1][2]
        assert ans != new_ans, f"case {n}: edit does not change the answer"

        def labelled(triples):
            return [[label_of(s), PID[p][0], label_of(o)] for s, p, o in triples]

        cases.append({
            "case_id": n,
            "requested_rewrite": [{
                "prompt": REL_PROMPT[rel],
                "relation_id": rel,
                "subject": label_of(subj),
                "target_true": {"str": label_of(old), "id": QIDS.get(old)},
                "target_new": {"str": label_of(new), "id": QIDS.get(new)},
                "question": REL_QUESTION[rel].format(label_of(subj)),
            }],
            "questions": [q.format(label_of(start)) for q in MULTI_HOP[rels]],
            "answer": label_of(ans),
            "answer_alias": ALIASES.get(ans, []),
            "new_answer": label_of(new_ans),
            "new_answer_alias": ALIASES.get(new_ans, []),
            "single_hops": [hop(p, s, o) for s, p, o in orig],
            "new_single_hops": [hop(p, s, o) for s, p, o in edited],
            "orig": {
                "triples_labeled": labelled(orig),
                "new_triples_labeled": labelled(edited),
                "edit_triples_labeled": labelled([(subj, rel, new)]),
            },
        })
    return cases


def main() -> None:
    kg = build_kg()
    n = write_nt(kg, HERE / "kg.nt")
    cases = build_cases(kg)
    (HERE / "edit_cases.json").write_text(
        json.dumps(cases, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    by_type: dict[str, int] = defaultdict(int)
    for cls in kg.types.values():
        by_type[cls] += 1
    by_pred: dict[str, int] = defaultdict(int)
    for _, p, _ in kg.facts:
        by_pred[p] += 1
    by_rel: dict[str, int] = defaultdict(int)
    for rel, *_ in EDITS:
        by_rel[rel] += 1
    print(f"kg.nt: {n} triples, {len(kg.types)} entities")
    print("  entities:", dict(sorted(by_type.items())))
    print("  facts:   ", dict(sorted(by_pred.items())))
    print(f"edit_cases.json: {len(cases)} cases", dict(by_rel))


if __name__ == "__main__":
    main()
